"""Tests for mha.detectors: each score is 1 on its ideal pattern, low on the others, in [0, 1]."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mha
from mha.backends import np_backend
from mha.detectors import circuits, patterns
from mha.detectors.patterns import induction_score, induction_targets
from mha.training.tasks import repeated_segments

L = 10


def one_hot_rows(targets: list[int], S: int = L) -> np.ndarray:
    w = np.zeros((len(targets), S))
    w[np.arange(len(targets)), targets] = 1.0
    return w


def ideal_patterns() -> dict[str, np.ndarray]:
    """Ideal patterns on L = 10 tokens (first/last rows fall back to self where needed)."""
    idx = np.arange(L)
    cls = np.zeros(L, dtype=bool)
    cls[[3, 7]] = True  # the class used by the token-class detector
    return {
        "previous_token": one_hot_rows([max(i - 1, 0) for i in idx]),
        "next_token": one_hot_rows([min(i + 1, L - 1) for i in idx]),
        "self": np.eye(L),
        "first_token": one_hot_rows([0] * L),
        "token_class": np.tile(cls / cls.sum(), (L, 1)),
        "broadness": np.full((L, L), 1.0 / L),
    }


CLASS = np.zeros(L, dtype=bool)
CLASS[[3, 7]] = True
ARCS = [(1, 4), (2, 4), (5, 8), (9, 8)]  # four queries, one target each


def score(name: str, w: np.ndarray) -> np.ndarray:
    if name == "token_class":
        return patterns.token_class_score(w, CLASS)
    if name == "arc":
        return patterns.arc_score(w, ARCS)
    return getattr(patterns, f"{name}_score")(w)


@pytest.mark.parametrize("name", list(ideal_patterns()))
def test_each_detector_scores_one_on_its_ideal_pattern(name):
    assert score(name, ideal_patterns()[name]) == pytest.approx(1.0)


@pytest.mark.parametrize("name", list(ideal_patterns()))
def test_each_detector_scores_low_on_the_other_patterns(name):
    for other, w in ideal_patterns().items():
        if other == name:
            continue
        # The highest cross scores: the uniform pattern read as a two-key class (2/L = 0.2),
        # the first-token pattern read as previous-token (row 1 -> key 0: 1/(L-1)), and
        # the two-key class pattern read as broadness (log 2 / log L = 0.30).
        bound = np.log(2) / np.log(L) if name == "broadness" else 0.2
        assert score(name, w) <= bound + 1e-12, (name, other)


def test_arc_score_is_one_when_every_arc_query_attends_to_its_targets():
    w = np.full((L, L), 1.0 / L)
    for q, k in ARCS:
        w[q] = 0.0
        w[q, k] = 1.0
    assert patterns.arc_score(w, ARCS) == pytest.approx(1.0)
    assert patterns.arc_score(np.eye(L), ARCS) == 0.0
    assert patterns.arc_score(np.full((L, L), 1.0 / L), ARCS) == pytest.approx(1.0 / L)


def test_arc_score_sums_over_several_targets_of_one_query_and_ignores_repeats():
    w = one_hot_rows([0] * L)
    w[2] = 0.0
    w[2, [4, 6]] = 0.5
    arcs = [(2, 4), (2, 6), (2, 6), (3, 4)]  # query 2 covers its mass; query 3 does not
    assert patterns.arc_score(w, arcs) == pytest.approx(0.5)


def test_broadness_with_causal_mask_scores_one_on_causal_uniform_attention():
    mask = np_backend.causal_mask(L)
    w = np_backend.softmax(np.zeros((L, L)), mask)
    assert patterns.broadness_score(w, mask) == pytest.approx(1.0)
    assert patterns.broadness_score(w) < 0.9  # against all L keys, short rows look narrow


def test_broadness_is_zero_on_one_hot_rows_and_half_way_on_half_uniform_rows():
    assert patterns.broadness_score(np.eye(L)) == 0.0
    w = np.zeros((4, 4))
    w[:, :2] = 0.5
    assert patterns.broadness_score(w) == pytest.approx(np.log(2) / np.log(4))


def test_token_class_score_of_uniform_attention_is_the_class_fraction():
    w = np.full((L, L), 1.0 / L)
    assert patterns.token_class_score(w, CLASS) == pytest.approx(CLASS.mean())


def test_token_class_score_accepts_a_class_per_leading_index():
    w = np.stack([np.eye(L), np.eye(L)])  # (2, L, L)
    classes = np.zeros((2, L), dtype=bool)
    classes[0] = True  # every key in the class for the first pattern, none for the second
    assert patterns.token_class_score(w, classes).tolist() == [1.0, 0.0]


def test_detectors_match_their_definitions_on_a_random_pattern():
    rng = np.random.default_rng(0)
    w = np_backend.softmax(rng.standard_normal((L, L)))
    assert patterns.previous_token_score(w) == pytest.approx(
        np.mean([w[i, i - 1] for i in range(1, L)])
    )
    assert patterns.next_token_score(w) == pytest.approx(
        np.mean([w[i, i + 1] for i in range(L - 1)])
    )
    assert patterns.self_score(w) == pytest.approx(np.mean(np.diag(w)))
    assert patterns.first_token_score(w) == pytest.approx(w[:, 0].mean())
    assert patterns.token_class_score(w, CLASS) == pytest.approx(w[:, CLASS].sum(1).mean())
    entropy = -(w * np.log(w)).sum(1) / np.log(L)
    assert patterns.broadness_score(w) == pytest.approx(entropy.mean())
    assert patterns.arc_score(w, ARCS) == pytest.approx(np.mean([w[q, k] for q, k in ARCS]))


def test_scores_keep_the_leading_dimensions():
    rng = np.random.default_rng(1)
    w = np_backend.softmax(rng.standard_normal((2, 3, L, L)))
    for name in (*ideal_patterns(), "arc"):
        out = score(name, w)
        assert out.shape == (2, 3), name
        assert out[1, 2] == pytest.approx(score(name, w[1, 2])), name
    assert isinstance(patterns.self_score(np.eye(3)), np.ndarray)
    assert patterns.self_score(np.eye(3)).shape == ()


def test_all_scores_runs_the_optional_detectors_only_when_asked():
    w = ideal_patterns()["previous_token"]
    base = patterns.all_scores(w)
    assert tuple(base) == patterns.SCORE_NAMES
    full = patterns.all_scores(w, key_in_class=CLASS, arcs=ARCS)
    assert set(full) == {*patterns.SCORE_NAMES, "token_class", "arc"}
    assert full["previous_token"] == 1.0


def test_detectors_accept_float32_softmax_and_torch_tensors():
    rng = np.random.default_rng(2)
    scores = torch.from_numpy(rng.standard_normal((3, 300, 300)).astype(np.float32)) * 5
    w = torch.softmax(scores, dim=-1)
    out = patterns.first_token_score(w)
    assert out.shape == (3,)
    assert out == pytest.approx(w[..., 0].double().mean(-1).numpy(), rel=1e-5)


@st.composite
def stochastic(draw, square: bool = True):
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    n = draw(st.integers(2, 7))
    s = n if square else draw(st.integers(1, 7))
    logits = draw(
        hnp.arrays(np.float64, (*lead, n, s), elements=st.floats(-30, 30, allow_nan=False))
    )
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(stochastic())
def test_every_score_lies_in_the_unit_interval_on_random_stochastic_rows(w):
    n = w.shape[-1]
    scores = patterns.all_scores(
        w, key_in_class=np.arange(n) % 2 == 0, arcs=[(n - 1, 0), (0, n - 1)]
    )
    for name, s in scores.items():
        assert s.shape == w.shape[:-2], name
        assert np.all((s >= 0) & (s <= 1)), name


@settings(max_examples=40, deadline=None)
@given(stochastic(square=False))
def test_non_positional_scores_accept_cross_attention_shapes(w):
    s = w.shape[-1]
    assert np.all(patterns.first_token_score(w) <= 1)
    assert patterns.token_class_score(w, np.ones(s, dtype=bool)) == pytest.approx(1.0)
    assert patterns.arc_score(w, [(0, s - 1)]).shape == w.shape[:-2]


@pytest.mark.parametrize(
    ("weights", "error", "match"),
    [
        (np.full((4, 4), 0.3), ValueError, r"weights rows must each sum to 1.*summing to 1\.2"),
        (np.array([[1.5, -0.5], [0.5, 0.5]]), ValueError, "weights must be non-negative"),
        (np.full((2, 2), np.nan), ValueError, "weights must be finite"),
        (np.eye(3, dtype=int), TypeError, "weights must be a floating array.*int"),
        (np.ones(3) / 3, ValueError, r"weights must have shape \(\.\.\., L, S\); got 1-D"),
        (np.zeros((3, 0)), ValueError, "weights must have at least one query and one key"),
    ],
)
def test_bad_weights_raise_errors_naming_the_argument(weights, error, match):
    with pytest.raises(error, match=match):
        patterns.first_token_score(weights)


@pytest.mark.parametrize(
    "fn", [patterns.previous_token_score, patterns.next_token_score, patterns.self_score]
)
def test_positional_detectors_require_square_weights(fn):
    with pytest.raises(ValueError, match=rf"weights must be square .* for {fn.__name__}"):
        fn(np.full((2, 3, 4), 0.25))


@pytest.mark.parametrize("fn", [patterns.previous_token_score, patterns.next_token_score])
def test_neighbour_detectors_require_two_tokens(fn):
    with pytest.raises(ValueError, match=rf"weights must have L >= 2 for {fn.__name__}"):
        fn(np.ones((1, 1)))


def test_token_class_errors_name_key_in_class():
    w = np.eye(4)
    with pytest.raises(TypeError, match="key_in_class must be a boolean array.*int"):
        patterns.token_class_score(w, np.array([1, 0, 0, 1]))
    with pytest.raises(ValueError, match=r"key_in_class must have shape \(S,\) = \(4,\); got"):
        patterns.token_class_score(w, np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="key_in_class must have shape .* or broadcast"):
        patterns.token_class_score(np.stack([w, w]), np.ones((3, 4), dtype=bool))


def test_arc_errors_name_arcs():
    w = np.eye(4)
    with pytest.raises(
        ValueError, match=r"arcs must index queries in \[0, L=4\).*got arc \(1, 4\)"
    ):
        patterns.arc_score(w, [(0, 1), (1, 4)])
    with pytest.raises(ValueError, match=r"arcs must index .* got arc \(-1, 0\)"):
        patterns.arc_score(w, [(-1, 0)])
    with pytest.raises(ValueError, match="arcs must hold at least one"):
        patterns.arc_score(w, [])
    with pytest.raises(ValueError, match=r"arcs must be \(query_index, key_index\) pairs"):
        patterns.arc_score(w, [(0, 1, 2)])
    with pytest.raises(TypeError, match="arcs must hold integer indices"):
        patterns.arc_score(w, [(0.0, 1.0)])


def test_broadness_mask_errors_name_mask():
    w = np.full((3, 3), 1 / 3)
    with pytest.raises(TypeError, match="mask must be boolean"):
        patterns.broadness_score(w, np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"mask must broadcast to weights \(3, 3\)"):
        patterns.broadness_score(w, np.ones((2, 3), dtype=bool))
    with pytest.raises(ValueError, match="weights must be 0 where mask is False"):
        patterns.broadness_score(w, np_backend.causal_mask(3))
    with pytest.raises(ValueError, match="needs rows with at least 2 allowed keys"):
        patterns.broadness_score(np.ones((3, 1)))


def test_word_arcs_expand_to_every_piece_of_both_words():
    word_ids = [None, 0, 1, 1, 2, None]  # [CLS] w0 w1a w1b w2 [SEP]
    assert patterns.word_arcs_to_token_arcs([(0, 1), (2, 1)], word_ids) == [
        (1, 2),
        (1, 3),
        (4, 2),
        (4, 3),
    ]
    assert patterns.word_arcs_to_token_arcs([(1, 0)], word_ids) == [(2, 1), (3, 1)]


def test_word_arcs_to_token_arcs_rejects_unknown_words():
    with pytest.raises(ValueError, match=r"word_arcs must index words in word_ids \(0\.\.1\).*5"):
        patterns.word_arcs_to_token_arcs([(0, 5)], [None, 0, 1, None])


def test_future_score_is_zero_for_causal_heads_and_counts_mass_on_later_keys():
    rng = np.random.default_rng(3)
    causal = np_backend.softmax(rng.standard_normal((2, L, L)), np_backend.causal_mask(L))
    assert np.all(patterns.future_score(causal) == 0.0)
    assert patterns.future_score(ideal_patterns()["next_token"]) == pytest.approx((L - 1) / L)
    assert patterns.future_score(np.full((L, L), 1.0 / L)) == pytest.approx((L - 1) / (2 * L))
    w = np_backend.softmax(rng.standard_normal((L, L)))
    expected = np.mean([w[i, i + 1 :].sum() for i in range(L)])
    assert patterns.future_score(w) == pytest.approx(expected)


def test_future_score_requires_square_weights():
    with pytest.raises(ValueError, match=r"weights must be square .* for future_score"):
        patterns.future_score(np.full((3, 4), 0.25))


# ---- induction heads -------------------------------------------------------------------


def _batch(seed=0, **kw):
    args = dict(min_period=4, max_period=8, rng=seed)
    args.update(kw)
    return repeated_segments(16, 20, 32, **args)


def test_induction_targets_of_a_hand_example():
    tokens = np.array([[7, 1, 2, 3, 1, 2, 3]])  # prefix 7, segment (1, 2, 3) twice
    t = induction_targets(tokens)[0]
    expected = {(4, 2), (5, 3), (6, 4)}  # query -> the key after the previous copy
    assert {(int(i), int(j)) for i, j in zip(*np.nonzero(t), strict=True)} == expected


def test_induction_targets_match_brute_force_and_stay_causal():
    tokens = np.random.default_rng(0).integers(0, 4, size=(3, 12))  # many repeats
    t = induction_targets(tokens)
    for b in range(3):
        for i in range(12):
            for k in range(12):
                want = k >= 1 and k - 1 < i and tokens[b, k - 1] == tokens[b, i]
                assert t[b, i, k] == want
    assert not np.triu(t, k=1).any()  # never a key after the query


def test_induction_targets_accept_torch_tokens():
    b = _batch()
    assert np.array_equal(induction_targets(b.tokens), induction_targets(b.tokens.numpy()))


def _rows(mass):
    return mass / mass.sum(axis=-1, keepdims=True)


def test_perfect_induction_head_scores_one_and_previous_token_head_zero():
    b = _batch(prefix_prob=0.5)
    tokens = b.tokens.numpy()
    L = tokens.shape[1]
    t = induction_targets(tokens)
    causal = np.tril(np.ones((L, L)))
    perfect = _rows(np.where(t.any(-1, keepdims=True), t, causal))  # (B, L, L)
    previous = np.broadcast_to(_rows(np.eye(L, k=-1) + np.eye(L) * (np.arange(L) == 0)), t.shape)
    w = np.stack([perfect, previous], axis=1)  # (B, 2, L, L)
    assert np.allclose(induction_score(w, tokens), [1.0, 0.0], atol=1e-12)


def test_induction_score_keeps_the_middle_dimensions():
    b = _batch()
    L = b.tokens.shape[1]
    w = np.broadcast_to(_rows(np.tril(np.ones((L, L)))), (16, 2, 3, L, L))
    assert induction_score(w, b.tokens).shape == (2, 3)
    assert induction_score(w[:, 0, 0], b.tokens).shape == ()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_induction_score_lies_in_unit_interval(seed):
    rng = np.random.default_rng(seed)
    b = _batch(seed=seed)
    L = b.tokens.shape[1]
    scores = rng.normal(size=(16, 3, L, L)) * 3
    w = np.exp(np.where(np.tril(np.ones((L, L))) > 0, scores, -np.inf))
    s = induction_score(_rows(w), b.tokens)
    assert s.shape == (3,) and ((s >= 0) & (s <= 1)).all()


def test_induction_score_errors_name_the_argument():
    tokens = np.array([[1, 2, 1, 2]])
    w = np.full((1, 4, 4), 0.25)
    with pytest.raises(TypeError, match=r"integer array of token ids; got dtype float64"):
        induction_targets(tokens.astype(float))
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, L\); got 1-D shape"):
        induction_targets(tokens[0])
    with pytest.raises(TypeError, match=r"weights must be a floating array .*; got dtype int64"):
        induction_score(np.ones((1, 4, 4), dtype=np.int64), tokens)
    with pytest.raises(ValueError, match=r"weights must have shape \(B, \.\.\., L, L\)"):
        induction_score(w[:, :3], tokens)
    with pytest.raises(ValueError, match=r"tokens must contain a repeated token"):
        induction_score(w, np.array([[1, 2, 3, 4]]))
    with pytest.raises(ValueError, match=r"weights rows must each sum to 1"):
        induction_score(2 * w, tokens)
    negative = w.copy()
    negative[0, 0, :2] = [-0.25, 0.75]  # still sums to 1
    with pytest.raises(ValueError, match=r"weights must be non-negative"):
        induction_score(negative, tokens)


def test_uniform_baseline_of_a_causal_head_is_not_one_over_l():
    b = patterns.uniform_baseline(np_backend.causal_mask(7))
    harmonic = sum(1 / k for k in range(1, 8))  # 1 + 1/2 + ... + 1/7
    assert b["previous_token"] == pytest.approx((harmonic - 1) / 6)  # 0.27
    assert b["self"] == pytest.approx(harmonic / 7) == b["first_token"]  # 0.37
    assert b["next_token"] == 0.0 and b["future"] == 0.0
    assert b["broadness"] == pytest.approx(1.0)
    assert round(float(b["previous_token"]), 2) == 0.27 and round(float(b["self"]), 2) == 0.37


def test_uniform_baseline_of_a_bidirectional_head_is_one_over_l_with_arcs_and_classes():
    b = patterns.uniform_baseline(np.ones((L, L), dtype=bool), key_in_class=CLASS, arcs=ARCS)
    for name in ("previous_token", "next_token", "self", "first_token", "arc"):
        assert b[name] == pytest.approx(1 / L)
    assert b["token_class"] == pytest.approx(CLASS.sum() / L)
    assert b["future"] == pytest.approx((L - 1) / (2 * L))


def test_uniform_attention_spreads_each_row_over_its_allowed_keys():
    mask = np.array([[True, False, True], [False, True, False]])
    # exact: 1/2 and 1/1 are exact divisions
    np.testing.assert_array_equal(patterns.uniform_attention(mask), [[0.5, 0, 0.5], [0, 1, 0]])


@pytest.mark.parametrize(
    ("mask", "error", "match"),
    [
        (np.ones((3, 3)), TypeError, "mask must be boolean"),
        (np.ones(3, dtype=bool), ValueError, r"mask must have shape \(\.\.\., L, S\)"),
        (np.array([[True, False], [False, False]]), ValueError, "1 fully masked row"),
    ],
)
def test_uniform_attention_errors_name_mask(mask, error, match):
    with pytest.raises(error, match=match):
        patterns.uniform_attention(mask)


def test_offset_attention_is_the_ideal_previous_and_next_token_pattern():
    prev = ideal_patterns()["previous_token"]
    np.testing.assert_array_equal(
        patterns.offset_attention(L, -1), prev
    )  # exact: 0/1, no arithmetic
    np.testing.assert_array_equal(
        patterns.offset_attention(L, 1), ideal_patterns()["next_token"]
    )  # exact: 0/1
    np.testing.assert_array_equal(patterns.offset_attention(L, 0), np.eye(L))  # exact: 0/1
    assert patterns.previous_token_score(patterns.offset_attention(L, -1)) == 1.0


def test_offset_attention_errors_name_the_argument():
    with pytest.raises(ValueError, match="q_len must be positive; got q_len=0"):
        patterns.offset_attention(0, 1)
    with pytest.raises(TypeError, match=r"q_len must be an int; got float 4\.0"):
        patterns.offset_attention(4.0, 1)  # a float size: TypeError, as everywhere
    with pytest.raises(TypeError, match="offset must be an int"):
        patterns.offset_attention(4, 1.0)
    assert patterns.offset_attention(np.int64(4), np.int64(-1)).shape == (4, 4)


def test_word_attention_sums_over_key_pieces_and_averages_over_query_pieces():
    # [CLS] w0 w1a w1b [SEP]: word 1 has two pieces
    w = np.array(
        [
            [1.0, 0.0, 0.0, 0.0, 0.0],
            [0.2, 0.2, 0.3, 0.3, 0.0],
            [0.0, 1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.5, 0.0, 0.5],
            [0.0, 0.0, 0.0, 0.0, 1.0],
        ]
    )
    words = patterns.word_attention(w, [None, 0, 1, 1, None])
    np.testing.assert_allclose(words, [[0.2, 0.6], [0.5, 0.25]], rtol=1e-15)
    assert patterns.word_attention(np.stack([w, w]), [None, 0, 1, 1, None]).shape == (2, 2, 2)


def test_word_attention_errors_name_word_ids():
    with pytest.raises(ValueError, match="word_ids must give one entry per token"):
        patterns.word_attention(np.eye(3), [0, 1])
    with pytest.raises(ValueError, match="word_ids must number the words 0..W-1"):
        patterns.word_attention(np.eye(3), [0, 2, None])


def test_head_accuracy_takes_the_most_attended_other_word_in_either_direction():
    heads = [1, None, 1, 2]  # words 0 and 2 depend on 1, word 3 on 2
    a = np.array(
        [
            [0.9, 0.1, 0.0, 0.0],  # self left out: predicts 1, right
            [0.0, 0.0, 0.0, 1.0],
            [0.0, 0.3, 0.0, 0.7],  # predicts 3, wrong
            [0.0, 0.0, 1.0, 0.0],  # predicts 2, right
        ]
    )
    assert patterns.head_accuracy(a, heads) == pytest.approx(2 / 3)
    # "head": word i's prediction is the other word attending most to i (column i)
    assert patterns.head_accuracy(a.T, heads, direction="head") == pytest.approx(2 / 3)
    assert patterns.head_accuracy(np.stack([a, a.T]), heads).shape == (2,)


def test_offset_accuracy_counts_heads_at_the_offset():
    heads = [1, None, 1, 2]
    assert patterns.offset_accuracy(heads, 1) == pytest.approx(1 / 3)
    assert patterns.offset_accuracy(heads, -1) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("heads", "kwargs", "match"),
    [
        ([None, None], {}, "at least one word a head"),
        ([1], {}, "one entry per word"),
        ([0, 0], {}, "indices of other words"),
        ([1, 0], {"direction": "up"}, "direction must be 'dependent' or 'head'"),
    ],
)
def test_head_accuracy_errors_name_the_argument(heads, kwargs, match):
    with pytest.raises(ValueError, match=match):
        patterns.head_accuracy(np.full((2, 2), 0.5), heads, **kwargs)


def test_value_norms_are_the_norms_of_each_heads_term_per_key():
    params = mha.init_params(16, 4, seed=3)
    x = np.random.default_rng(3).standard_normal((2, 5, 16))
    norms = circuits.value_norms(x, params)
    assert norms.shape == (2, 4, 5)
    for h in range(4):
        blk = params.head(h)
        b_v = params.b_v[h * 4 : (h + 1) * 4]
        term = (x @ blk["w_v"] + b_v) @ blk["w_o"]  # (B, S, D)
        np.testing.assert_allclose(norms[:, h], np.linalg.norm(term, axis=-1), rtol=1e-12)


def test_value_weighted_attention_reweights_rows_by_the_norms():
    w = np.full((1, 1, 2, 2), 0.5)
    out = circuits.value_weighted_attention(w, np.array([[[1.0, 3.0]]]))
    np.testing.assert_allclose(out, np.full((1, 1, 2, 2), 0.0) + [0.25, 0.75], rtol=1e-15)
    same = circuits.value_weighted_attention(w, np.ones((1, 1, 2)))
    np.testing.assert_allclose(same, w, rtol=1e-15)
    zero = circuits.value_weighted_attention(w, np.zeros((1, 1, 2)))
    assert not zero.any()
    with pytest.raises(ValueError, match="norms must have shape"):
        circuits.value_weighted_attention(w, np.ones((1, 2)))
    with pytest.raises(ValueError, match="norms must be non-negative"):
        circuits.value_weighted_attention(w, -np.ones((1, 1, 2)))


def test_value_norms_require_the_model_width():
    with pytest.raises(ValueError, match=r"x must have shape \(B, S, D\) with D=16"):
        circuits.value_norms(np.ones((2, 3)), mha.init_params(16, 4))


def test_score_terms_sum_to_the_scores_and_only_the_key_dependent_ones_reach_the_softmax():
    params = mha.init_params(16, 4, seed=5)
    x = np.random.default_rng(5).standard_normal((2, 6, 16))
    terms = circuits.score_terms(x, params)
    _, weights = np_backend.multi_head_attention(x, x, x, params)
    tol = 1e-12  # float64 softmax of O(1) scores, two routes
    np.testing.assert_allclose(np_backend.softmax(sum(terms.values())), weights, atol=tol)
    kept = np_backend.softmax(terms["bilinear"] + terms["query_bias"])
    np.testing.assert_allclose(kept, weights, atol=tol)
    assert not np.allclose(np_backend.softmax(terms["bilinear"]), weights, atol=1e-3)
    # the key bias and the constant are the same for every key of a query
    for name in ("key_bias", "constant"):
        assert np.ptp(terms[name], axis=-1).max() < 1e-12


def test_score_terms_without_biases_are_the_bilinear_form_only():
    params = mha.init_params(8, 2, bias=False, seed=1)
    terms = circuits.score_terms(np.ones((1, 3, 8)), params)
    assert all(not terms[n].any() for n in ("query_bias", "key_bias", "constant"))
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, D\) with D=8"):
        circuits.score_terms(np.ones((3, 8)), params)


def test_copying_score_is_one_for_copying_minus_one_for_anti_copying_zero_for_rotation():
    e, u = np.eye(4), np.eye(4)
    v, o = np.eye(4)[:, :2], np.eye(4)[:2]  # keep two token directions
    assert circuits.copying_score(e, v, o, u) == pytest.approx(1.0)
    assert circuits.copying_score(e, v, -o, u) == pytest.approx(-1.0)
    turn = np.array([[0.0, 1.0], [-1.0, 0.0]]) @ o  # eigenvalues +i and -i
    assert abs(circuits.copying_score(e, v, turn, u)) < 1e-15
    stacked = circuits.copying_score(e, np.stack([v, v]), np.stack([o, -o]), u)
    np.testing.assert_allclose(stacked, [1.0, -1.0], rtol=1e-15)


def test_copying_score_uses_the_eigenvalues_of_the_full_circuit():
    rng = np.random.default_rng(0)
    e, u = rng.standard_normal((12, 6)), rng.standard_normal((6, 12))
    v, o = rng.standard_normal((6, 3)), rng.standard_normal((3, 6))
    lam = np.linalg.eigvals(e @ v @ o @ u)  # (V,), all but Dh of them zero
    expected = lam.sum().real / np.abs(lam).sum()
    assert circuits.copying_score(e, v, o, u) == pytest.approx(expected, rel=1e-9)


def test_copying_score_errors_name_the_shapes():
    with pytest.raises(ValueError, match="must chain"):
        circuits.copying_score(np.eye(4), np.eye(3)[:, :2], np.eye(4)[:2], np.eye(4))
    with pytest.raises(ValueError, match="non-zero eigenvalue"):
        circuits.copying_score(np.eye(4), np.zeros((4, 2)), np.eye(4)[:2], np.eye(4))


# ---- duplicate-token heads ---------------------------------------------------------------


def test_duplicate_targets_mark_every_other_copy_in_both_directions():
    t = patterns.duplicate_targets(np.array([[5, 6, 5, 7, 5]]))[0]
    assert t[0].tolist() == [False, False, True, False, True]
    assert t[2].tolist() == [True, False, False, False, True]
    assert not t[1].any() and not t[3].any()
    assert not np.diagonal(t).any()


def test_duplicate_head_scores_one_and_induction_head_zero():
    rng = np.random.default_rng(0)
    seg = np.stack([rng.permutation(20)[:6] for _ in range(3)])
    tokens = np.concatenate([seg, seg], axis=1)  # (3, 12): a segment repeated once
    dup = patterns.duplicate_targets(tokens).astype(float)  # every token has exactly one copy
    assert np.array_equal(dup.sum(-1), np.ones((3, 12)))  # exact: integer counts
    ind_t = induction_targets(tokens).astype(float)
    ind = np.where(ind_t.any(-1, keepdims=True), ind_t, np.eye(12))
    w = np.stack([dup, ind], axis=1)  # (3, 2, 12, 12)
    score = patterns.duplicate_token_score(w, tokens)
    assert np.isclose(score[0], 1.0) and np.isclose(score[1], 0.0)
    assert np.isclose(induction_score(w, tokens)[1], 1.0)


def test_duplicate_token_score_errors():
    w = np.full((1, 4, 4), 0.25)
    with pytest.raises(ValueError, match="no query has a duplicate"):
        patterns.duplicate_token_score(w, np.array([[1, 2, 3, 4]]))
    with pytest.raises(ValueError, match="weights must have shape \\(B, ..., L, L\\)"):
        patterns.duplicate_token_score(w, np.array([[1, 1, 3]]))
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        patterns.duplicate_token_score(w, np.array([[1.0, 1.0, 3.0, 4.0]]))
