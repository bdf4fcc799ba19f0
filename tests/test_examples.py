"""The examples the book works through: the hand-sized layer and the two-target fit."""

from __future__ import annotations

import numpy as np
import pytest

from mha.backends import np_backend
from mha.models import examples
from mha.numerics import tolerance


def test_agreement_example_gives_the_verb_a_query_for_each_target_and_one_for_both() -> None:
    ex = examples.agreement_example()
    assert ex.tokens[ex.verb] == "are" and ex.x.shape == (9, 12)
    assert ex.features[:3] == ["noun", "plural", "verb"]
    keys, cabinet = ex.tokens.index("keys"), ex.tokens.index("cabinet")
    assert cabinet == ex.verb - 1
    # The scores are the dot products of a query with every token's features.
    assert np.argmax(ex.x @ ex.queries["subject"]) == keys
    assert np.argmax(ex.x @ ex.queries["neighbour"]) == cabinet
    np.testing.assert_array_equal(  # exact: a sum of two arrays of 0 and 16
        ex.queries["both"], ex.queries["subject"] + ex.queries["neighbour"]
    )
    q = np.stack([ex.queries[n] for n in ("subject", "neighbour", "both")])  # (3, D)
    _, w = np_backend.scaled_dot_product_attention(q, ex.x, ex.x)  # (3, L)
    assert w[0, keys] > 0.95 and w[1, cabinet] > 0.9  # one query, one target
    assert 0.45 < w[2, keys] < 0.5 and 0.45 < w[2, cabinet] < 0.5  # both: split in two


def test_agreement_example_values_hand_over_the_number_and_differ_from_the_keys() -> None:
    ex = examples.agreement_example()
    assert ex.value_features == ["plural", "singular"] and ex.values.shape == (9, 2)
    nouns = np.flatnonzero(ex.x[:, ex.features.index("noun")])  # keys, cabinet, table
    np.testing.assert_array_equal(ex.values.sum(axis=1), ex.x[:, 0])  # exact: one 1 per noun
    np.testing.assert_array_equal(  # exact: 0 and 1
        ex.values[nouns, 0], ex.x[nouns, ex.features.index("plural")]
    )
    q = np.stack([ex.queries[n] for n in ("subject", "both")])  # (2, D)
    out, _ = np_backend.scaled_dot_product_attention(q, ex.x, ex.values)  # (2, 2)
    assert out[0, 0] > 0.95 and out[0, 1] < 0.05  # the subject hands over "plural"
    assert 0.45 < out[1, 0] < 0.5 and 0.45 < out[1, 1] < 0.55  # both: half of each number


def test_agreement_example_sharpness_sets_how_much_the_best_key_gets() -> None:
    ex_soft, ex_sharp = examples.agreement_example(2.0), examples.agreement_example(32.0)
    weights = [
        np_backend.scaled_dot_product_attention(e.queries["subject"][None], e.x, e.x)[1][0, 1]
        for e in (ex_soft, ex_sharp)
    ]
    assert weights[0] < 0.5 < 0.99 < weights[1]


@pytest.mark.parametrize(
    ("sharpness", "error", "match"),
    [(0.0, ValueError, "sharpness must be positive"), ("16", TypeError, "must be a real number")],
)
def test_agreement_example_refuses_a_sharpness_that_is_not_positive(sharpness, error, match):
    with pytest.raises(error, match=match):
        examples.agreement_example(sharpness)


def test_worked_example_is_three_tokens_two_heads_of_width_two_with_integer_weights() -> None:
    x, p = examples.worked_example()
    assert x.shape == (1, 3, 4) and (p.d_model, p.num_heads, p.d_head) == (4, 2, 2)
    assert p.b_qkv is None and p.b_o is None
    for a in (x, p.w_qkv, p.w_o):
        np.testing.assert_array_equal(a, np.round(a))  # exact: integers
    # Head 2 matches feature 3 of a query with feature 4 of a key: token 0 (features 3, 4
    # = 0, 1) scores 1 against token 1 (features 3, 4 = 1, 0) only.
    q2, k2 = x @ p.head(1)["w_q"], x @ p.head(1)["w_k"]
    np.testing.assert_array_equal(q2[0] @ k2[0].T, [[0, 1, 0], [1, 0, 0], [0, 0, 0]])  # exact: ints


def test_worked_example_output_is_the_sum_and_difference_of_its_two_heads() -> None:
    x, p = examples.worked_example()
    out, w = np_backend.multi_head_attention(x, x, x, p)
    heads = [w[0, h] @ (x[0] @ p.head(h)["w_v"]) for h in range(2)]  # (L, Dh) each
    expected = np.hstack([heads[0] + heads[1], heads[0] - heads[1]])
    tol = tolerance.attention_tolerance(x, x, x, p)[0][0]
    tolerance.assert_close(out[0], expected, tol)


def test_two_target_shares_reads_the_previous_token_from_head_1_and_token_0_from_head_h() -> None:
    w = np.zeros((2, 4, 4))
    w[0, [2, 3], [1, 2]] = 0.7
    w[1, [2, 3], 0] = 0.4
    previous, first = examples.two_target_shares(w)
    assert previous.tolist() == [0.7, 0.7] and first.tolist() == [0.4, 0.4]


@pytest.mark.parametrize("seed", [0, 1])
def test_two_heads_fit_both_targets_and_one_head_cannot_pass_one_half(seed: int) -> None:
    one = examples.fit_two_targets(1, seed)
    two = examples.fit_two_targets(2, seed)
    assert one.num_params == two.num_params == 4 * 16**2 + 4 * 16
    assert one.weights.shape == (1, 8, 8) and two.weights.shape == (2, 8, 8)
    shares_one = np.minimum(*examples.two_target_shares(one.weights))
    shares_two = np.minimum(*examples.two_target_shares(two.weights))
    assert shares_one.max() <= 0.5  # a check of the code: one distribution, two targets
    assert shares_two.min() > 0.95  # the method: two heads serve one target each


def test_fit_two_targets_is_reproducible_in_one_process() -> None:
    a = examples.fit_two_targets(2, 3, steps=5)
    b = examples.fit_two_targets(2, 3, steps=5)
    np.testing.assert_array_equal(a.weights, b.weights)  # exact: the same call repeated


def test_residual_stack_applies_each_block_to_the_previous_stream() -> None:
    from mha import init_params

    x = np.random.default_rng(0).standard_normal((1, 5, 8))
    streams = examples.residual_stack(x, 3, num_heads=2, seed=1, norm_first=True)
    assert len(streams) == 4 and streams[0] is x
    second, _ = np_backend.attention_block(streams[1], init_params(8, 2, seed=101), norm_first=True)
    np.testing.assert_array_equal(streams[2], second)  # exact: the same call repeated
    post = examples.residual_stack(x, 2, num_heads=2, seed=1, norm_first=False)
    for s in post[1:]:  # post-norm: every block's output rows are normalised
        np.testing.assert_allclose(s.mean(-1), 0.0, rtol=0, atol=1e-12)


def test_two_output_task_puts_the_previous_content_and_the_first_into_two_halves() -> None:
    x, target, p, q = examples.two_output_task(0, 3, q_len=5, d_model=10)
    assert x.shape == (3, 5, 10) and target.shape == (3, 3, 10) and p.shape == q.shape == (5, 5)
    content, position = x[..., :5], x[..., 5:]
    np.testing.assert_array_equal(position[1], np.eye(5))  # exact: one-hot positions
    for i in (2, 3, 4):  # query i: [c_{i-1} P, c_0 Q]
        np.testing.assert_allclose(target[:, i - 2, :5], content[:, i - 1] @ p, rtol=0, atol=1e-12)
        np.testing.assert_allclose(target[:, i - 2, 5:], content[:, 0] @ q, rtol=0, atol=1e-12)
    x2, _, p2, _ = examples.two_output_task(0, 4, q_len=5, d_model=10)
    np.testing.assert_array_equal(p2, p)  # exact: the maps depend on the seed alone
    assert not np.allclose(x2[:3, :, :5], content)  # other sentences


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 9}, "d_model must be even; got d_model=9"),
        ({"q_len": 9}, r"q_len must be between 3 and d_model / 2 = 8; got q_len=9"),
        ({"q_len": 0}, "q_len must be positive; got q_len=0"),
    ],
)
def test_two_output_task_rejects_bad_sizes(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        examples.two_output_task(0, 2, **kwargs)


def test_two_heads_explain_the_two_outputs_and_one_head_cannot() -> None:
    one = examples.fit_two_outputs(1, 0)
    two = examples.fit_two_outputs(2, 0)
    assert one.num_params == two.num_params == 4 * 16**2 + 4 * 16
    assert one.weights.shape == (1, 8, 8) and two.weights.shape == (2, 8, 8)
    assert 0.3 < one.fixed_weight_floor <= 0.5  # min / sum of two similar norms
    assert one.unexplained > 0.2 and two.unexplained < 0.02  # wide margins, one seed
    with pytest.raises(ValueError, match="held_out must differ from num_sentences"):
        examples.fit_two_outputs(2, 0, num_sentences=8, held_out=8)
