"""mha.precision: float16/bfloat16 thresholds from finfo, checked against real arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha import precision as P

TORCH_LOW = (torch.float16, torch.bfloat16, torch.float32)


def next_up(x: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(x, torch.tensor(float("inf"), dtype=x.dtype))


@pytest.mark.parametrize("dtype", TORCH_LOW)
def test_exp_is_finite_at_the_threshold_and_overflows_one_step_above(dtype) -> None:
    x = torch.tensor(P.exp_overflow_threshold(dtype), dtype=dtype)
    assert float(x) == P.exp_overflow_threshold(dtype)  # representable
    assert torch.isfinite(torch.exp(x)) and torch.isinf(torch.exp(next_up(x)))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_numpy_exp_overflows_at_the_same_threshold(dtype) -> None:
    x = np.array(P.exp_overflow_threshold(dtype), dtype=dtype)
    with np.errstate(over="ignore"):
        assert np.isfinite(np.exp(x)) and np.isinf(np.exp(np.nextafter(x, np.inf)))


def test_thresholds_are_about_log_max() -> None:
    for dtype in TORCH_LOW:
        gap = np.log(float(torch.finfo(dtype).max)) - P.exp_overflow_threshold(dtype)
        assert 0 <= gap <= P.spacing(P.exp_overflow_threshold(dtype), dtype)
    assert P.exp_overflow_threshold(torch.float16) == 11.0859375
    assert P.exp_overflow_threshold(torch.bfloat16) == 88.5


@pytest.mark.parametrize("dtype", TORCH_LOW)
@pytest.mark.parametrize("value", [1.0, 3.0, 1e4, 1234.5])
def test_spacing_is_the_gap_to_the_next_number(dtype, value) -> None:
    x = torch.tensor(value, dtype=dtype)
    assert float(next_up(x) - x) == P.spacing(float(x), dtype)


def test_scores_closer_than_the_spacing_become_one_number() -> None:
    for dtype, gap in ((torch.float16, 8.0), (torch.bfloat16, 64.0)):
        assert P.spacing(1e4, dtype) == gap
        base = float(torch.tensor(1e4).to(dtype))  # 1e4 itself is not a bfloat16 number
        pair = torch.tensor([base, base + gap / 2 - 0.5], dtype=torch.float64).to(dtype)
        assert pair[0] == pair[1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_running_sum_of_ones_stops_at_the_limit(dtype) -> None:
    limit = P.running_sum_limit(dtype)
    assert limit == 2 / torch.finfo(dtype).eps
    n = int(2 * limit)
    assert float(P.sequential_sum(torch.ones(2, n), dtype)[1]) == limit
    assert float(P.sequential_sum(torch.ones(int(limit)), dtype)) == limit  # exact up to it
    assert float(torch.ones(n, dtype=dtype).sum()) == n  # PyTorch accumulates in float32


def test_numpy_float16_cumsum_stalls_where_its_pairwise_sum_does_not() -> None:
    ones = np.ones(4096, dtype=np.float16)
    assert np.cumsum(ones)[-1] == P.running_sum_limit(np.float16) == 2048
    assert ones.sum() == 4096


def test_precision_functions_reject_bad_arguments() -> None:
    with pytest.raises(TypeError, match="dtype must be a floating dtype; got dtype int32"):
        P.spacing(1.0, np.int32)
    with pytest.raises(TypeError, match="dtype must be a floating dtype; got dtype torch.int64"):
        P.running_sum_limit(torch.int64)
    with pytest.raises(ValueError, match="value must be finite and nonzero; got value=0.0"):
        P.spacing(0.0, torch.float16)
    with pytest.raises(TypeError, match="values must be a torch.Tensor; got list"):
        P.sequential_sum([1.0], torch.float16)
    with pytest.raises(ValueError, match="values must have shape"):
        P.sequential_sum(torch.tensor(1.0), torch.float16)
