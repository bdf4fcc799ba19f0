"""The rounding tolerance: its values, that it bounds real rounding, and that it rejects more."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha.backends import np_backend
from mha.numerics import tolerance


@pytest.mark.parametrize(
    ("dtype", "u"),
    [
        (np.float64, 2.0**-53),
        (np.float32, 2.0**-24),
        (np.float16, 2.0**-11),
        (torch.float64, 2.0**-53),
        (torch.float32, 2.0**-24),
        (torch.float16, 2.0**-11),
        (torch.bfloat16, 2.0**-8),
    ],
)
def test_unit_roundoff_is_half_the_machine_epsilon(dtype, u) -> None:
    assert tolerance.unit_roundoff(dtype) == u


def test_unit_roundoff_reads_the_dtype_of_an_array_or_tensor() -> None:
    assert tolerance.unit_roundoff(np.zeros(2, np.float32)) == 2.0**-24
    assert tolerance.unit_roundoff(torch.zeros(2, dtype=torch.bfloat16)) == 2.0**-8


@pytest.mark.parametrize("dtype", [np.int64, torch.int32, bool, "abc"])
def test_unit_roundoff_rejects_non_float_dtypes(dtype) -> None:
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        tolerance.unit_roundoff(dtype)


def test_gamma_is_n_u_over_one_minus_n_u() -> None:
    u = 2.0**-24
    assert tolerance.gamma(np.float32, 100) == pytest.approx(100 * u / (1 - 100 * u), rel=1e-15)


def test_gamma_refuses_sums_too_long_for_the_precision() -> None:
    with pytest.raises(ValueError, match="terms \\* unit roundoff must be below 1"):
        tolerance.gamma(torch.bfloat16, 256)
    assert tolerance.gamma(np.float32, 2**24 - 1) == (1 - 2**-24) / 2**-24  # exact: n u < 1
    for terms in (2**24, 10**400):  # n u = 1, and an int beyond every float (OverflowError)
        with pytest.raises(ValueError, match="terms \\* unit roundoff must be below 1"):
            tolerance.gamma(np.float32, terms)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"terms": 0}, ValueError, "terms must be positive; got terms=0"),
        ({"terms": 2.0}, TypeError, "terms must be an int; got float 2.0"),
        ({"terms": True}, TypeError, "terms must be an int; got bool"),
        ({"terms": 4, "stages": 0}, ValueError, "stages must be positive; got stages=0"),
        ({"terms": 4, "stages": 1.5}, TypeError, "stages must be an int"),
        ({"terms": 4, "scale": -1.0}, ValueError, "scale must be a finite number >= 0"),
        ({"terms": 4, "scale": np.inf}, ValueError, "scale must be a finite number >= 0"),
        ({"terms": 4, "scale": "big"}, TypeError, "scale must be a number; got str"),
        ({"terms": 4, "scale": 10**400}, ValueError, "scale must be a finite number >= 0"),
        ({"terms": 10**400}, ValueError, r"terms \* unit roundoff must be below 1"),
    ],
)
def test_rounding_tolerance_names_the_bad_argument(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        tolerance.rounding_tolerance(np.float64, **kwargs)


def test_rounding_tolerance_is_twice_stages_gamma_scale() -> None:
    got = tolerance.rounding_tolerance(np.float64, terms=64, scale=3.0, stages=4)
    assert got == pytest.approx(2 * 4 * tolerance.gamma(np.float64, 64) * 3.0, rel=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(5))
def test_matmul_tolerance_bounds_a_column_block_against_the_whole_product(dtype, seed) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 7, 48)).astype(dtype)
    w = rng.standard_normal((48, 48)).astype(dtype)
    whole = x @ w  # (3, 7, 48)
    block = w[:, 12:24]  # a column block, as one head's projection
    bound = tolerance.matmul_tolerance(x, block)
    tolerance.assert_close(whole[..., 12:24], x @ block, bound)
    # Each route is within half the bound of the exact (float64-of-float64) product, too.
    exact = x.astype(np.float64) @ block.astype(np.float64)
    if dtype == np.float32:
        assert tolerance.is_close(x @ block, exact, bound / 2)


def test_matmul_tolerance_bounds_float32_against_float64_over_orders_and_sizes() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 16, 300, 2000):
        a = rng.standard_normal((5, n)).astype(np.float32)
        b = rng.standard_normal((n, 3)).astype(np.float32)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        reversed_order = (a[:, ::-1] @ b[::-1, :]).astype(np.float64)  # another summation order
        tolerance.assert_close(a @ b, exact, tolerance.matmul_tolerance(a, b) / 2)
        tolerance.assert_close(reversed_order, a @ b, tolerance.matmul_tolerance(a, b))


def test_matmul_tolerance_accepts_torch_tensors() -> None:
    a = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    b = torch.randn(8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bound = tolerance.matmul_tolerance(a, b)
    assert bound.shape == (4, 2) and (bound > 0).all()
    tolerance.assert_close(a @ b, (a.numpy() @ b.numpy()), bound)


def test_matmul_tolerance_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="matching inner dimensions"):
        tolerance.matmul_tolerance(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="a must have shape"):
        tolerance.matmul_tolerance(np.ones(3), np.ones((3, 2)))


def test_assert_close_rejects_a_difference_just_above_the_bound() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 32)), rng.standard_normal((32, 5))
    bound = tolerance.matmul_tolerance(a, b)
    worse = a @ b
    worse[2, 3] += 1.5 * bound[2, 3]
    assert not tolerance.is_close(worse, a @ b, bound)
    with pytest.raises(AssertionError, match="more than the rounding tolerance"):
        tolerance.assert_close(worse, a @ b, bound, name="worse")


def test_assert_close_returns_the_largest_difference() -> None:
    got = tolerance.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.5]), 1.0)
    assert got == 0.5


def test_is_close_requires_non_finite_entries_to_agree() -> None:
    nan = np.array([np.nan, 1.0])
    assert tolerance.is_close(nan, nan.copy(), 0.0)
    assert not tolerance.is_close(nan, np.array([0.0, 1.0]), 10.0)
    assert not tolerance.is_close(np.array([np.inf]), np.array([-np.inf]), 10.0)
    with pytest.raises(AssertionError, match="differ in their NaN or infinite entries"):
        tolerance.assert_close(nan, np.array([0.0, 1.0]), 10.0)  # not "by inf, tolerance 0"


def test_is_close_rejects_other_shapes_and_bad_tolerances() -> None:
    with pytest.raises(ValueError, match="one shape"):
        tolerance.is_close(np.ones(2), np.ones(3), 0.1)
    with pytest.raises(ValueError, match="tolerance must be finite and >= 0"):
        tolerance.is_close(np.ones(2), np.ones(2), -0.1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(4))
def test_attention_tolerance_bounds_the_forms_and_the_backends(dtype, seed) -> None:
    from mha import init_params
    from mha.backends import np_backend, torch_backend

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 9, 24)).astype(dtype)
    kv = rng.standard_normal((2, 13, 24)).astype(dtype)
    mask = rng.random((2, 1, 9, 13)) < 0.7
    p = init_params(24, 4, seed=seed, dtype=dtype)
    out_tol, w_tol = tolerance.attention_tolerance(x, kv, kv, p, mask)
    exact_out, exact_w = np_backend.multi_head_attention(
        x.astype(np.float64),
        kv.astype(np.float64),
        kv.astype(np.float64),
        p.to_numpy(np.float64),
        mask,
    )
    t_mask = torch.from_numpy(mask)
    for form in ("per_head", "fused", "packed"):
        out, w = np_backend.multi_head_attention(x, kv, kv, p, mask, form=form)
        t_kv = torch.from_numpy(kv)
        t_out, t_w = torch_backend.multi_head_attention(
            torch.from_numpy(x), t_kv, t_kv, p.to_torch(), t_mask, form=form
        )
        for got_out, got_w in ((out, w), (t_out, t_w)):
            # each route is within half the bound of the exact layer, so two are within it
            tolerance.assert_close(got_out, exact_out, out_tol / 2)
            tolerance.assert_close(got_w, exact_w, w_tol / 2)


def test_attention_tolerance_is_far_below_what_a_bug_changes() -> None:
    """Worst-case bounds are loose, yet in float32 they still catch the usual mistakes."""
    from dataclasses import replace

    from mha import init_params
    from mha.backends import np_backend

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 9, 24)).astype(np.float32)
    p = init_params(24, 4, dtype=np.float32)
    out_tol, w_tol = tolerance.attention_tolerance(x, x, x, p)
    out, w = np_backend.multi_head_attention(x, x, x, p)
    swapped = np.concatenate([p.w_qkv[:, 6:12], p.w_qkv[:, :6], p.w_qkv[:, 12:]], axis=1)
    bugs = {
        "biases dropped": replace(p, b_qkv=None, b_o=None),
        "two query heads swapped": replace(p, w_qkv=swapped),
        "output bias doubled": replace(p, b_o=2 * p.b_o),
    }
    for name, wrong in bugs.items():
        bad_out, bad_w = np_backend.multi_head_attention(x, x, x, wrong)
        assert not tolerance.is_close(bad_out, out, out_tol), name
    assert out_tol.max() < 1e-2 and w_tol.max() < 1e-3


def test_softmax_tolerance_grows_linearly_with_the_logit_scale() -> None:
    tol = [
        tolerance.softmax_tolerance(np.float32, logit_scale=c, d_head=4, kv_len=8)
        for c in (0, 1, 1e4)
    ]
    floor = tol[0]  # the softmax's own rounding
    assert tol[1] < 1e-5 < 1e-4 < tol[2]  # a fixed 1e-5 is right at logits of 1, not at 1e4
    assert (tol[2] - floor) == pytest.approx(1e4 * (tol[1] - floor), rel=1e-12)
    for bad in (-1.0, 10**400):  # 10**400: an int no float holds (OverflowError before)
        with pytest.raises(ValueError, match="logit_scale must be a finite number >= 0"):
            tolerance.softmax_tolerance(np.float32, logit_scale=bad, d_head=4, kv_len=4)
    with pytest.raises(TypeError, match="d_head must be an int; got float 4.0"):
        tolerance.softmax_tolerance(np.float32, logit_scale=1.0, d_head=4.0, kv_len=4)


def test_float32_weights_at_logits_of_1e4_differ_from_float64_by_about_1e_4() -> None:
    """The rounding of one score to float32's grid, whatever the kernel, and within the bound.

    3 * 3333.3218 (both float32 numbers) is exactly halfway between two float32 numbers near
    1e4, so every float32 route rounds that score by 2**-11; the two weights (scores 0.97
    apart) then move by about w1 w2 2**-11 ~ 1e-4 from their float64 values.
    """
    from mha.backends import np_backend, torch_backend

    q = np.array([[[3.0]]], dtype=np.float32)  # (1, L=1, Dh=1)
    k = np.array([[[3333.3218], [3333.0]]], dtype=np.float32)  # (1, S=2, Dh=1)
    v = np.array([[[1.0], [0.0]]], dtype=np.float32)  # the output is the first weight
    exact = float(q[0, 0, 0]) * float(k[0, 0, 0])  # a product of two float32s, exact in float64
    rounding = abs(float(np.float32(exact)) - exact)
    assert rounding == 2.0**-11  # exact: halfway between two float32 numbers
    out64, w64 = np_backend.scaled_dot_product_attention(*(a.astype(np.float64) for a in (q, k, v)))
    w1, w2 = w64[0, 0]
    bound = tolerance.softmax_tolerance(np.float32, logit_scale=exact, d_head=1, kv_len=2)
    qt, kt, vt = (torch.from_numpy(a) for a in (q, k, v))
    explicit = {
        "numpy": np_backend.scaled_dot_product_attention(q, k, v)[1],
        "torch": torch_backend.scaled_dot_product_attention(qt, kt, vt)[1].numpy(),
    }
    for name, w32 in explicit.items():
        diff = tolerance.max_abs_diff(w32, w64)
        assert 0.9 * w1 * w2 * rounding < diff <= bound, name  # about 1e-4: above 1e-5
        assert diff > 1e-5
    fast = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt).numpy()
    assert tolerance.max_abs_diff(fast, out64) <= bound + 2 * tolerance.gamma(np.float32, 2)


@pytest.mark.parametrize("logit_scale", [1.0, 1e2, 1e4])
def test_float32_attention_agrees_with_float64_within_the_logit_scale_bound(logit_scale) -> None:
    from mha.backends import np_backend, torch_backend

    g = np.random.default_rng(int(logit_scale))
    Dh, S = 16, 9
    q = g.standard_normal((2, 3, 5, Dh))
    k = g.standard_normal((2, 3, S, Dh))
    q *= np.sqrt(logit_scale * np.sqrt(Dh) / np.abs(q @ k.swapaxes(-1, -2)).max())
    k *= np.sqrt(logit_scale * np.sqrt(Dh) / np.abs(q @ k.swapaxes(-1, -2)).max())
    v = g.standard_normal((2, 3, S, Dh))
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    c = float(
        (np.abs(q32.astype(np.float64))[..., :, None, :] * np.abs(k32)[..., None, :, :])
        .sum(-1)
        .max()
    )
    c /= np.sqrt(Dh)
    rho = tolerance.softmax_tolerance(np.float32, logit_scale=c, d_head=Dh, kv_len=S)
    out_bound = (rho + 2 * tolerance.gamma(np.float32, S)) * np.abs(v32).max()
    out64, w64 = np_backend.scaled_dot_product_attention(
        *(a.astype(np.float64) for a in (q32, k32, v32))
    )
    t = [torch.from_numpy(a) for a in (q32, k32, v32)]
    routes = {
        "numpy": np_backend.scaled_dot_product_attention(q32, k32, v32),
        "torch": torch_backend.scaled_dot_product_attention(*t),
    }
    for name, (out, w) in routes.items():
        tolerance.assert_close(w, w64, rho, name=f"{name} weights")
        tolerance.assert_close(out, out64, out_bound, name=f"{name} output")
    fast = torch.nn.functional.scaled_dot_product_attention(*t)
    tolerance.assert_close(fast, out64, out_bound, name="fast path output")


# ---- the boundary of attention_tolerance and unit_roundoff ---------------------------------


def _layer(seed=0):
    import mha

    params = mha.init_params(8, 2, num_kv_heads=1, seed=seed)
    x = np.random.default_rng(seed).standard_normal((2, 3, 8))
    return params, x


def test_attention_tolerance_refuses_an_additive_float_mask_as_every_backend_does() -> None:
    params, x = _layer()
    keep = np_backend.causal_mask(3)
    additive = np.where(keep, 0.0, -np.inf)  # astype(bool) would read it inverted
    match = r"mask must be boolean \(True = may attend\); got dtype float64"
    with pytest.raises(TypeError, match=match):
        tolerance.attention_tolerance(x, x, x, params, additive)
    with pytest.raises(TypeError, match=match):
        np_backend.multi_head_attention(x, x, x, params, additive)
    with pytest.raises(TypeError, match=r"mask must be boolean .*got dtype float32"):
        tolerance.attention_tolerance(x, x, x, params, torch.from_numpy(additive).float())
    out_tol, w_tol = tolerance.attention_tolerance(x, x, x, params, keep)  # a bool mask is read
    assert out_tol.shape == (2, 3, 8) and w_tol.shape == (2, 2, 3, 3)
    assert (w_tol[..., ~keep] == 0).all()  # exact: masked weights are 0 in every route


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ("params None", TypeError, r"params must be MHAParams; got NoneType"),
        (
            "params of another dtype",
            TypeError,
            r"params must have the inputs' dtype float32, as the layer requires; got params of "
            r"dtype float64",
        ),
        ("int query", TypeError, r"query must be a floating array or tensor; got dtype int64"),
        ("mixed dtypes", TypeError, r"query, key and value must share one dtype; got .*float32"),
        ("list key", TypeError, r"key must be a floating array or tensor; got list"),
        ("nan query", ValueError, r"query must be finite"),
        ("wrong width", ValueError, r"key width must equal d_model=8"),
        ("meta mask", TypeError, r"mask must hold values; got a meta tensor"),
        ("mask shape", ValueError, r"mask must broadcast to \(B, H, L, S\)"),
    ],
)
def test_attention_tolerance_checks_its_arguments(args, exc, match) -> None:
    params, x = _layer()
    q, k, v, p, m = x, x, x, params, None
    if args == "params None":
        p = None
    elif args == "params of another dtype":  # the layer refuses them too
        q, k, v = (x.astype(np.float32) for x in (q, k, v))
        with pytest.raises(TypeError, match="must share one dtype"):
            np_backend.multi_head_attention(q, k, v, p)
    elif args == "int query":
        q = np.ones((2, 3, 8), dtype=np.int64)
    elif args == "mixed dtypes":
        v = x.astype(np.float32)
    elif args == "list key":
        k = x.tolist()
    elif args == "nan query":
        q = x.copy()
        q[0, 0, 0] = np.nan
    elif args == "wrong width":
        k = x[..., :6]
    elif args == "meta mask":
        m = torch.ones(3, 3, dtype=torch.bool, device="meta")
    elif args == "mask shape":
        m = np.ones((4, 3), bool)
    with pytest.raises(exc, match=match):
        tolerance.attention_tolerance(q, k, v, p, m)


def test_attention_tolerance_takes_torch_and_numpy_of_one_dtype() -> None:
    params, x = _layer()
    t = torch.from_numpy(x)
    mixed = tolerance.attention_tolerance(t, x, t, params)
    same = tolerance.attention_tolerance(x, x, x, params)
    np.testing.assert_array_equal(mixed[0], same[0])  # exact: the same float64 computation
    torch_params = tolerance.attention_tolerance(x, x, x, params.to_torch())  # float64 both
    np.testing.assert_array_equal(torch_params[0], same[0])  # exact: the same computation


@pytest.mark.parametrize("fn", [tolerance.unit_roundoff, lambda d: tolerance.gamma(d, 3)])
def test_a_dtype_of_none_is_refused_not_read_as_float64(fn) -> None:
    with pytest.raises(TypeError, match=r"dtype must be a floating dtype; got None"):
        fn(None)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: tolerance.max_abs_diff(None, np.ones(2)), TypeError, r"actual must be an array"),
        (lambda: tolerance.max_abs_diff(np.ones(2), [1, [2]]), ValueError, r"expected must be a "),
        (lambda: tolerance.max_abs_diff(np.ones(2), np.ones(2) * 1j), TypeError, r"real numbers"),
        (lambda: tolerance.is_close(np.ones(2), np.ones(2), None), TypeError, r"tolerance must"),
        (
            lambda: tolerance.assert_close(np.ones(2), np.ones(2), 0.0, name=3),
            TypeError,
            r"name must be a str; got int 3",
        ),
        (
            lambda: tolerance.assert_close(np.ones(2), np.ones(2), np.ones(3)),
            ValueError,
            r"tolerance must broadcast to the shape of actual \(2,\); got shape \(3,\)",
        ),
        (
            lambda: tolerance.assert_close(torch.ones(2, device="meta"), np.ones(2), 0.0),
            TypeError,
            r"actual must hold values; got a meta tensor",
        ),
        (
            lambda: tolerance.matmul_tolerance(np.ones((2, 3, 4)), np.ones((3, 4, 5))),
            ValueError,
            r"a and b must have broadcastable leading \(batch\) dimensions",
        ),
        (
            lambda: tolerance.matmul_tolerance(np.full((2, 2), np.nan), np.ones((2, 2))),
            ValueError,
            r"a must be finite",
        ),
        (
            lambda: tolerance.matmul_tolerance([[1.0]], np.ones((1, 1))),
            TypeError,
            r"a must be a floating array or tensor; got list",
        ),
        (
            lambda: tolerance.matmul_tolerance(np.ones((2, 2)), None),
            TypeError,
            r"b must be a floating array or tensor; got NoneType",
        ),
        (lambda: tolerance.rounding_tolerance(None, terms=3), TypeError, r"got None"),
        (
            lambda: tolerance.softmax_tolerance(None, logit_scale=1.0, d_head=2, kv_len=3),
            TypeError,
            r"dtype must be a floating dtype; got None",
        ),
    ],
)
def test_comparison_helpers_refuse_what_they_cannot_compare(call, exc, match) -> None:
    with pytest.raises(exc, match=match):
        call()


def test_attention_tolerances_take_an_empty_batch() -> None:
    """B = 0 is a valid call of the forward and its backward (empty results); the bounds of
    those calls are answered too, not refused by NumPy's maximum of no entries."""
    x, w = np.zeros((0, 3, 4)), np.zeros((0, 3, 3))
    out_tol, lse_tol = tolerance.tiled_attention_tolerance(x, x, x)
    assert out_tol == 0.0 and lse_tol > 0  # no values: nothing to be off by in the output
    grads = tolerance.attention_gradient_tolerance(x, x, x, w, x)
    assert [g.shape for g in grads] == [(0, 3, 4)] * 3
