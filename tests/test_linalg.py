"""Tests for mha.analysis._linalg: one-thread decompositions shared by rank, subspaces and
bottleneck."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha.analysis import _linalg
from mha.core import _tools
from mha.numerics import tolerance


def random_matrix(m: int, n: int, seed: int = 0, dtype=np.float64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((m, n)).astype(dtype)


def test_one_thread_sets_one_torch_thread_and_restores_the_count():
    before = torch.get_num_threads()
    with _tools.one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"), _tools.one_thread():
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_one_thread_works_as_a_decorator():
    @_tools.one_thread()
    def threads() -> int:
        return torch.get_num_threads()

    before = torch.get_num_threads()
    assert threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("shape", [(7, 4), (4, 7), (5, 5)])
def test_svd_reconstructs_the_matrix_with_orthonormal_factors(shape):
    a = random_matrix(*shape, seed=1)
    u, s, vt = _linalg.svd(a)
    k = min(shape)
    assert u.shape == (shape[0], k) and s.shape == (k,) and vt.shape == (k, shape[1])
    assert np.all(np.diff(s) <= 0)  # descending
    tol = tolerance.rounding_tolerance(np.float64, terms=max(shape), scale=s[0], stages=4)
    tolerance.assert_close((u * s) @ vt, a, tol)
    tolerance.assert_close(u.T @ u, np.eye(k), tolerance.rounding_tolerance(np.float64, terms=50))
    # singular values agree with NumPy's LAPACK (another route: a tolerance, not equality)
    tolerance.assert_close(s, np.linalg.svd(a, compute_uv=False), tol)
    tolerance.assert_close(_linalg.svdvals(a), s, tol)


def test_svdvals_of_a_stack_and_of_float32():
    stack = np.stack([random_matrix(4, 3, seed=i) for i in range(5)])  # (5, 4, 3)
    s = _linalg.svdvals(stack)
    assert s.shape == (5, 3) and s.dtype == np.float64
    assert _linalg.svdvals(random_matrix(4, 3, dtype=np.float32)).dtype == np.float32
    assert _linalg.svdvals(random_matrix(4, 3).astype(np.float16)).dtype == np.float64


def test_pinv_of_a_full_row_rank_matrix_is_a_right_inverse():
    x = random_matrix(4, 9, seed=2)
    x_pinv = _linalg.pinv(x)
    assert x_pinv.shape == (9, 4)
    s = np.linalg.svd(x, compute_uv=False)
    bound = tolerance.rounding_tolerance(np.float64, terms=9, scale=s[0] / s[-1], stages=4)
    tolerance.assert_close(x @ x_pinv, np.eye(4), bound)


def test_as_matrix_converts_tensors_and_rejects_bad_input():
    a = _linalg.as_matrix("a", torch.ones(2, 3, dtype=torch.float64, requires_grad=True))
    assert isinstance(a, np.ndarray) and a.shape == (2, 3)
    with pytest.raises(TypeError, match="a must be a NumPy array or a torch tensor; got list"):
        _linalg.as_matrix("a", [[1.0]])
    with pytest.raises(ValueError, match=r"a must be a 2-D matrix \(m, n\); got 1-D shape"):
        _linalg.as_matrix("a", np.ones(3))
    with pytest.raises(TypeError, match="a must have a floating dtype; got dtype int64"):
        _linalg.as_matrix("a", np.ones((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="a must be finite"):
        _linalg.as_matrix("a", np.full((2, 2), np.nan))


def test_rank_cutoff_is_the_larger_of_atol_and_rtol_times_the_largest_singular_value():
    s = np.array([4.0, 1.0, 0.0])
    default = 7 * np.finfo(np.float64).eps * 4.0
    assert _linalg.rank_cutoff(s, (7, 3), np.float64, None, 0.0) == pytest.approx(default)
    assert _linalg.rank_cutoff(s, (7, 3), np.float64, 0.1, 0.0) == pytest.approx(0.4)
    assert _linalg.rank_cutoff(s, (7, 3), np.float64, 0.1, 1.0) == 1.0
    assert _linalg.rank_cutoff(np.array([]), (0, 3), np.float64, None, 0.0) == 0.0
    with pytest.raises(ValueError, match="rtol must be at least 0; got rtol=-1.0"):
        _linalg.rank_cutoff(s, (7, 3), np.float64, -1.0, 0.0)
