"""mha.numerics.precision: float16/bfloat16 thresholds from finfo, checked against real
arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha.numerics import precision as P
from mha.numerics import tolerance
from mha.numerics.tolerance import assert_close

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


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
def test_pairwise_sum_of_ones_is_exact_where_a_running_sum_stalls(dtype) -> None:
    n = int(4 * P.running_sum_limit(dtype))  # every partial sum a power of two: exact
    ones = torch.ones(n)
    assert float(P.pairwise_sum(ones, dtype)) == n
    assert float(P.sequential_sum(ones, dtype)) == P.running_sum_limit(dtype)


def test_pairwise_sum_rounds_each_level_to_the_format() -> None:
    x = torch.tensor([1.0, 2.0**-11, 3.0, 5.0, 7.0])  # odd length: the last term is carried
    assert float(P.pairwise_sum(x, torch.float64)) == 16.0 + 2.0**-11  # exact: float64 holds it
    assert float(P.pairwise_sum(x, torch.float16)) == 16.0  # exact: 1 + 2^-11 rounds to 1
    rows = torch.ones(3, 7)
    assert P.pairwise_sum(rows, torch.float16).tolist() == [7.0, 7.0, 7.0]


def test_pairwise_float16_sum_differs_from_a_float32_accumulation_on_random_data() -> None:
    x = torch.from_numpy(np.random.default_rng(2).uniform(0, 1, 4096)).to(torch.float16)
    exact = float(x.double().sum())  # float64 holds every partial sum of these float16 numbers
    pairwise = float(P.pairwise_sum(x, torch.float16))
    # float32 accumulation in any order is off by at most gamma_n * sum |x| < 0.5, and the
    # interval exact +- 0.5 rounds to one float16 number (spacing 2 there): torch.sum's answer
    # if it accumulates in float32.
    one = float(torch.tensor(exact, dtype=torch.float64).to(torch.float16))
    assert abs(exact - one) + 4096 * 2**-24 * exact < P.spacing(exact, torch.float16) / 2
    assert float(x.sum()) == one != pairwise  # exact: float16 results of the same sum


def test_rounded_attention_without_rounding_is_the_float64_softmax() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 8, generator=g, dtype=torch.float64) for n in (5, 7, 7))
    ref = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, -1) @ v
    out_tol, _ = tolerance.tiled_attention_tolerance(q.numpy(), k.numpy(), v.numpy())  # two routes
    assert_close(P.rounded_attention(q, k, v), ref, out_tol)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
def test_casting_the_weights_stays_within_u_max_v_and_storing_large_scores_does_not(dtype) -> None:
    g = torch.Generator().manual_seed(1)
    q = 4 * torch.randn(64, 32, generator=g, dtype=torch.float64)
    k = 4 * torch.randn(256, 32, generator=g, dtype=torch.float64)
    v = torch.randn(256, 32, generator=g, dtype=torch.float64)
    ref = P.rounded_attention(q, k, v)
    cast = P.rounded_attention(q, k, v, weights_dtype=dtype)
    stored = P.rounded_attention(q, k, v, scores_dtype=dtype)
    info = torch.finfo(dtype)
    bound = (info.eps / 2 + 256 * info.smallest_normal * info.eps / 2) * float(v.abs().max())
    assert float((cast - ref).abs().max()) <= bound
    assert float((stored - ref).abs().max()) > 4 * float((cast - ref).abs().max())


def test_new_precision_functions_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"values must have shape \(..., n\), n >= 1"):
        P.pairwise_sum(torch.ones(0), torch.float16)
    with pytest.raises(TypeError, match="values must be a torch.Tensor; got list"):
        P.pairwise_sum([1.0], torch.float16)
    with pytest.raises(TypeError, match="query must be a floating torch.Tensor"):
        P.rounded_attention(np.ones((2, 2)), torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="query and key must have the same width"):
        P.rounded_attention(torch.ones(2, 3), torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(TypeError, match="weights_dtype must be a floating torch.dtype"):
        P.rounded_attention(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2),
                            weights_dtype=torch.int8)  # fmt: skip


# ---- spacing below the normal range, and the boundary ---------------------------------------


def _magnitudes(dtype, finfo) -> np.ndarray:
    """Numbers of ``dtype`` from its smallest subnormal to its largest, 40 per binade and
    every power of two, both signs (float64 values exactly representable in ``dtype``)."""
    info = finfo(dtype)
    tiny, eps, big = float(info.tiny), float(info.eps), float(info.max)
    low = np.log2(eps * tiny)  # the smallest subnormal
    grid = 2.0 ** np.linspace(low, np.log2(big), 40 * int(np.log2(big) - low))
    powers = 2.0 ** np.arange(low, np.log2(big) + 1)
    x = np.concatenate([grid, powers, [tiny * (1 - eps), tiny, big]])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_spacing_equals_numpy_spacing_at_every_magnitude_subnormals_included(dtype) -> None:
    with np.errstate(over="ignore"):  # the top of the grid may round past max to inf
        values = np.unique(_magnitudes(dtype, np.finfo).astype(dtype))
    # at max np.spacing gives inf (the next number up is inf); below it, the gap above
    values = values[(np.abs(values) < np.finfo(dtype).max) & (values != 0)]
    assert (np.abs(values) < np.finfo(dtype).tiny).sum() > 50  # subnormals are tested
    ours = np.array([P.spacing(float(v), dtype) for v in values])
    np.testing.assert_array_equal(ours, np.spacing(np.abs(values)))  # exact: powers of two


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_spacing_equals_the_gap_to_torch_nextafter_subnormals_included(dtype) -> None:
    x = torch.tensor(_magnitudes(dtype, torch.finfo)).to(dtype).abs().unique()
    x = x[torch.isfinite(x) & (x != 0) & (x < torch.finfo(dtype).max)]  # a next number above
    assert int((x < torch.finfo(dtype).tiny).sum()) > 50
    gap = (next_up(x) - x).double().numpy()  # neighbours: their difference is exact
    ours = np.array([P.spacing(float(v), dtype) for v in x.double()])
    np.testing.assert_array_equal(ours, gap)  # exact: powers of two


def test_spacing_below_the_normal_range_is_the_smallest_subnormal() -> None:
    assert P.spacing(1e-6, np.float16) == float(np.spacing(np.float16(1e-6))) == 2.0**-24
    assert P.spacing(1e-40, np.float32) == float(np.finfo(np.float32).smallest_subnormal)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: P.spacing(1.0, None), TypeError, r"dtype must be a floating dtype; got None"),
        (lambda: P.exp_overflow_threshold(None), TypeError, r"floating dtype; got None"),
        (lambda: P.running_sum_limit(None), TypeError, r"floating dtype; got None"),
        (lambda: P.spacing(7e4, np.float16), ValueError, r"value must be within the finite"),
        (lambda: P.spacing(float("nan"), np.float16), ValueError, r"finite and nonzero"),
        (lambda: P.spacing(True, np.float16), TypeError, r"value must be a real number"),
        (lambda: P.spacing("1", np.float16), TypeError, r"value must be a real number"),
        (lambda: P.spacing(10**400, np.float64), ValueError, r"value must be within the finite"),
        (lambda: P.spacing(np.int64(0), np.float16), ValueError, r"finite and nonzero"),
        (
            lambda: P.sequential_sum(torch.ones(3), np.float16),
            TypeError,
            r"dtype must be a floating torch.dtype; got",
        ),
        (
            lambda: P.pairwise_sum(torch.ones(3), None),
            TypeError,
            r"dtype must be a floating torch.dtype; got None",
        ),
    ],
)
def test_precision_refuses_none_and_out_of_range_arguments(call, exc, match) -> None:
    with pytest.raises(exc, match=match):
        call()


def _qkv(*shapes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]


@pytest.mark.parametrize("bad", ["query", "key", "value"])
@pytest.mark.parametrize("what", [float("nan"), float("inf")])
def test_rounded_attention_refuses_nan_and_infinite_inputs(bad, what) -> None:
    named = dict(zip(("query", "key", "value"), _qkv((2, 3, 4), (2, 5, 4), (2, 5, 3)), strict=True))
    named[bad][0, 1, 0] = what
    with pytest.raises(ValueError, match=rf"{bad} must be finite; got NaN or infinite values"):
        P.rounded_attention(**named, weights_dtype=torch.float16)


def test_rounded_attention_checks_leading_dimensions_and_devices() -> None:
    q, k, v = _qkv((2, 3, 4), (3, 5, 4), (3, 5, 3))
    with pytest.raises(ValueError, match=r"broadcastable leading \(batch\) dimensions"):
        P.rounded_attention(q, k, v)
    with pytest.raises(TypeError, match=r"query must hold values; got a meta tensor"):
        P.rounded_attention(q.to("meta"), k, v)
    with pytest.raises(ValueError, match=r"query must have shape \(\.\.\., length, width\)"):
        P.rounded_attention(q[0, 0], k, v)
    with pytest.raises(ValueError, match=r"head width Dh \(last dimension\) of at least 1"):
        P.rounded_attention(q[..., :0], k[..., :0], v)
    broadcast = P.rounded_attention(q[:1], k[:1].expand(3, 5, 4), v[:1])  # broadcasts: fine
    assert broadcast.shape == (3, 3, 3)


@pytest.mark.parametrize(
    ("scale", "scores_dtype", "fmt"),
    [(300.0, torch.float16, "torch.float16"), (1e160, None, "torch.float64")],
)
def test_rounded_attention_refuses_scores_that_round_to_infinity(scale, scores_dtype, fmt) -> None:
    """An infinite score gives NaN weights (inf - inf): refused, naming the format."""
    q, k, v = _qkv((2, 3, 4), (2, 5, 4), (2, 5, 3))
    match = rf"the scores Q K\^T / sqrt\(Dh\) must be finite in {fmt}; got scores beyond"
    with pytest.raises(ValueError, match=match):
        P.rounded_attention(scale * q, scale * k, v, scores_dtype=scores_dtype)
    # just inside the range: finite weights, and float16 scores of about 1e4 are still an answer
    out = P.rounded_attention(30.0 * q, 30.0 * k, v, scores_dtype=torch.float16)
    assert bool(torch.isfinite(out).all())
