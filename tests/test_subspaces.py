"""Tests for mha.analysis.subspaces: principal angles and the Frobenius cosine."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
from mha.analysis import subspaces as sub


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), q=st.integers(1, 6), seed=st.integers(0, 10**6))
def test_principal_angles_match_scipy_sorted_ascending(p, q, seed):
    a, b = rand((12, p), seed), rand((12, q), seed + 1)
    ours = sub.principal_angles(a, b)
    assert ours.shape == (min(p, q),)
    assert np.all(np.diff(ours) >= 0)
    np.testing.assert_allclose(ours, np.sort(sl.subspace_angles(a, b)), atol=1e-10)
    np.testing.assert_allclose(np.cos(ours), sub.principal_cosines(a, b), atol=1e-10)


def test_identical_subspaces_have_zero_angles_whatever_the_basis():
    a = rand((10, 4))
    r = np.linalg.qr(rand((4, 4), 1))[0]
    np.testing.assert_allclose(sub.principal_angles(a, a @ r), 0.0, atol=1e-12)
    assert np.all(sub.principal_cosines(a, 3 * a) <= 1.0)


def test_orthogonal_subspaces_have_ninety_degree_angles():
    e = np.eye(6)
    np.testing.assert_allclose(sub.principal_angles(e[:, :2], e[:, 2:5], degrees=True), 90.0)
    np.testing.assert_allclose(sub.principal_cosines(e[:, :2], e[:, 2:5]), 0.0)


@pytest.mark.parametrize("theta", [1e-9, 1e-4, 0.3, np.pi / 4, 1.2, np.pi / 2 - 1e-9])
def test_known_angles_are_recovered_accurately_even_when_tiny(theta):
    e = np.eye(5)
    a = e[:, [0, 2]]
    b = np.stack([np.cos(theta) * e[:, 0] + np.sin(theta) * e[:, 1], e[:, 3]], axis=1)
    got = sub.principal_angles(a, b)
    np.testing.assert_allclose(got, [theta, np.pi / 2], rtol=1e-9, atol=1e-15)


def test_degrees_are_radians_times_180_over_pi():
    a, b = rand((8, 3)), rand((8, 3), 1)
    np.testing.assert_allclose(
        sub.principal_angles(a, b, degrees=True), np.degrees(sub.principal_angles(a, b))
    )


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (np.ones((4, 2)), np.eye(4)[:, :2], "a must have full column rank .* got numerical rank 1"),
        (np.eye(4)[:, :2], np.eye(5)[:, :2], "a and b must have the same number of rows"),
        (np.eye(3), np.ones((3, 4)), r"b must have between 1 and D=3 columns"),
    ],
)
def test_principal_angles_reject_bad_input(a, b, match):
    with pytest.raises(ValueError, match=match):
        sub.principal_angles(a, b)


def test_frobenius_cosine_is_basis_dependent_while_angles_are_not():
    a = rand((32, 8))
    r = np.linalg.qr(rand((8, 8), 3))[0]
    assert sub.frobenius_cosine(a, a) == pytest.approx(1.0)
    assert abs(sub.frobenius_cosine(a, a @ r)) < 0.9
    np.testing.assert_allclose(sub.principal_angles(a, a @ r), 0.0, atol=1e-12)


def test_frobenius_cosine_rejects_bad_input():
    with pytest.raises(ValueError, match=r"a and b must have the same shape; got \(2, 2\)"):
        sub.frobenius_cosine(np.eye(2), np.eye(3))
    with pytest.raises(ValueError, match="a and b must be non-zero"):
        sub.frobenius_cosine(np.zeros((2, 2)), np.eye(2))


def test_pairwise_frobenius_cosines_equal_frobenius_cosine_of_this_packages_head_blocks():
    torch.manual_seed(42)
    weight = torch.nn.Linear(32, 32).weight.detach().double().numpy()  # (out, in)
    table = sub.pairwise_frobenius_cosines(weight, 4)
    p = mha.MHAParams.from_qkv(weight.T, weight.T, weight.T, weight.T, 4)
    blocks = sub.head_blocks(p, "w_q")
    for i in range(4):
        for j in range(4):
            assert table[i, j] == pytest.approx(sub.frobenius_cosine(blocks[i], blocks[j]))
    np.testing.assert_allclose(np.diag(table), 1.0)


def test_pairwise_frobenius_cosines_reject_bad_input():
    with pytest.raises(ValueError, match=r"w_q_rows must be square \(D, D\)"):
        sub.pairwise_frobenius_cosines(np.ones((4, 3)), 2)
    with pytest.raises(ValueError, match="num_heads must divide d_model; got d_model=4, num_heads"):
        sub.pairwise_frobenius_cosines(np.eye(4), 3)


def test_head_blocks_shapes_and_errors():
    p = mha.init_params(12, 3)
    assert sub.head_blocks(p, "w_v").shape == (3, 12, 4)
    # exact: a transposed view
    np.testing.assert_array_equal(sub.head_blocks(p, "w_o")[1], p.head(1)["w_o"].T)
    with pytest.raises(ValueError, match="which must be one of"):
        sub.head_blocks(p, "w_x")
    with pytest.raises(TypeError, match="params must be MHAParams; got int"):
        sub.head_blocks(3)


def test_pairwise_principal_cosines_agree_with_principal_cosines():
    p = mha.init_params(16, 4, seed=1)
    blocks = sub.head_blocks(p)
    table = sub.pairwise_principal_cosines(blocks)
    assert table.shape == (4, 4, 4)
    np.testing.assert_allclose(table[0, 2], sub.principal_cosines(blocks[0], blocks[2]))
    np.testing.assert_allclose(table[1, 1], 1.0)
    with pytest.raises(ValueError, match=r"blocks must have shape \(H, D, Dh\); got 2-D"):
        sub.pairwise_principal_cosines(np.eye(3))


def test_orthonormal_basis_spans_the_columns_and_keeps_float32():
    a = rand((9, 3))
    q = sub.orthonormal_basis(a)
    np.testing.assert_allclose(q.T @ q, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(q @ (q.T @ a), a, atol=1e-12)  # a lies in span(q)
    assert sub.orthonormal_basis(a.astype(np.float32)).dtype == np.float32


def test_mixed_precision_inputs_are_compared_in_float64():
    a, b = rand((10, 3)), rand((10, 2), 1)
    np.testing.assert_allclose(
        sub.principal_cosines(a.astype(np.float32), b), sub.principal_cosines(a, b), atol=1e-6
    )


def test_pairwise_principal_cosines_are_symmetric_with_unit_diagonal():
    blocks = rand((5, 20, 3), 2)
    table = sub.pairwise_principal_cosines(blocks)
    np.testing.assert_allclose(table, table.transpose(1, 0, 2), atol=1e-12)
    np.testing.assert_allclose(table[np.arange(5), np.arange(5)], 1.0, atol=1e-12)
    expected = np.cos(np.sort(sl.subspace_angles(blocks[3], blocks[1])))
    np.testing.assert_allclose(table[3, 1], expected, atol=1e-10)
