"""The shared argument checks: what they accept (their errors are in test_errors.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha import init_params
from mha.backends import np_backend, torch_backend
from mha.core import _groups
from mha.core._checks import arguments, arrays, layer
from mha.core._checks.numpy_arrays import NUMPY

TARGET = (2, 3, 4, 5)  # (B, H, L, S)


@pytest.mark.parametrize(
    "shape",
    [(4, 5), (2, 1, 1, 5), (1, 3, 4, 5), (2, 3, 4, 5), (5,), (3, 1, 5), (1, 1), ()],
    ids=str,
)
def test_check_mask_accepts_every_shape_that_broadcasts(shape: tuple[int, ...]) -> None:
    mask = np.ones(shape, dtype=bool)
    arguments.check_mask(mask, TARGET, True)
    np.broadcast_to(mask, TARGET)  # NumPy agrees that it broadcasts


@pytest.mark.parametrize("shape", [(5, 4), (3, 3, 4, 5), (2, 3, 4, 2), (1, 2, 3, 4, 5), (4,)])
def test_check_mask_rejects_every_shape_that_does_not_broadcast(shape: tuple[int, ...]) -> None:
    mask = np.ones(shape, dtype=bool)
    with pytest.raises(ValueError, match="must broadcast"):
        arguments.check_mask(mask, TARGET, True)
    with pytest.raises(ValueError):
        np.broadcast_to(mask, TARGET)  # NumPy agrees that it does not


def test_check_mask_reads_torch_shapes_too() -> None:
    arguments.check_mask(torch.ones(2, 1, 1, 5, dtype=torch.bool), TARGET, True)
    with pytest.raises(ValueError, match=r"got shape \(5, 4\)"):
        arguments.check_mask(torch.ones(5, 4, dtype=torch.bool), TARGET, True)


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), torch.tensor(3).item()])
def test_check_int_accepts_python_and_numpy_ints(value: object) -> None:
    arguments.check_int("n", value)
    arguments.check_sizes(value * 2, value)


@pytest.mark.parametrize("value", [3.0, True, "3", None, np.float64(3)])
def test_check_int_rejects_floats_bools_and_others(value: object) -> None:
    with pytest.raises(TypeError, match="n must be an int"):
        arguments.check_int("n", value)


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        (((3, 4), (5, 4), (5, 4)), ()),
        (((2, 3, 4), (2, 5, 4), (2, 5, 4)), (2,)),
        (((2, 4, 3, 4), (2, 1, 5, 4), (2, 1, 5, 4)), (2, 4)),  # keys shared by heads
        (((4, 3, 4), (2, 1, 5, 4), (5, 4)), (2, 4)),
    ],
)
def test_broadcast_batch_matches_numpy_broadcasting(
    shapes: tuple[tuple[int, ...], ...], expected: tuple[int, ...]
) -> None:
    arrays = [np.zeros(s) for s in shapes]
    assert arguments.broadcast_batch(*arrays) == expected
    assert expected == np.broadcast_shapes(*(s[:-2] for s in shapes))


def test_check_same_dtype_ignores_absent_biases() -> None:
    a = np.zeros(2)
    arguments.check_same_dtype({"a": a, "b": None, "c": a.copy()})
    with pytest.raises(TypeError, match="a=float64, c=float32"):
        arguments.check_same_dtype({"a": a, "b": None, "c": a.astype(np.float32)})


def test_check_finite_uses_the_backend_predicate() -> None:
    arguments.check_finite("x", np.ones(3), lambda x: bool(np.isfinite(x).all()))
    with pytest.raises(ValueError, match="x must be finite"):
        arguments.check_finite("x", np.array([1.0, np.nan]), lambda x: bool(np.isfinite(x).all()))


@pytest.mark.parametrize("form", layer.FORMS)
def test_check_form_accepts_the_three_forms(form: str) -> None:
    layer.check_form(form)


@pytest.mark.parametrize("eps", [1e-5, 1, np.float32(1e-6)])
def test_check_layer_norm_params_accepts_positive_numbers(eps: float) -> None:
    arguments.check_layer_norm_params(4, np.ones(4), None, eps)


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan"), float("inf"), np.float64(-1.0)])
def test_check_layer_norm_params_rejects_other_eps_values(eps: object) -> None:
    with pytest.raises(ValueError, match="eps must be positive and finite"):
        arguments.check_layer_norm_params(4, None, None, eps)


@pytest.mark.parametrize("eps", [True, None, "1e-5", torch.tensor(1e-5), np.array([1e-5])])
def test_check_layer_norm_params_rejects_eps_that_is_not_a_number(eps: object) -> None:
    with pytest.raises(TypeError, match=r"eps must be a real number \(int or float\)"):
        arguments.check_layer_norm_params(4, None, None, eps)


def test_distinct_drops_repeats_of_the_same_object_only():
    a, b = np.zeros(3), np.zeros(3)  # equal values, different objects
    assert arguments.distinct(("query", a), ("key", a), ("value", b)) == [
        ("query", a),
        ("value", b),
    ]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_self_attention_input_checked_once_still_rejects_non_finite(backend, bad):
    x = np.random.default_rng(0).standard_normal((1, 3, 4))
    x[0, 2, 1] = bad
    params = init_params(4, 2)
    if backend == "torch":
        x, params = torch.from_numpy(x), params.to_torch()
    module = np_backend if backend == "numpy" else torch_backend
    with pytest.raises(ValueError, match="query must be finite"):
        module.multi_head_attention(x, x, x, params)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((4, 5), (4, 5)), ((5,), (5,)), ((2, 3, 4, 5), (2, 4, 5)), ((2, 1, 4, 5), (2, 4, 5))],
)
def test_head_slice_takes_one_heads_mask_or_the_shared_one(shape, expected) -> None:
    mask = np.random.default_rng(0).random(shape) < 0.5
    part = _groups.head_slice(mask, 1)
    assert part.shape == expected
    if len(shape) == 4:
        assert np.array_equal(part, mask[:, 1 if shape[1] > 1 else 0])
    else:
        assert part is mask  # the same for every head


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_check_positive_accepts_positive_ints(value) -> None:
    arguments.check_positive("n", value)


def test_both_backends_name_the_array_type_and_how_to_convert_params() -> None:
    p = init_params(4, 2)
    x = np.ones((1, 2, 4))
    t = torch.from_numpy(x)
    with pytest.raises(TypeError, match=r"params.w_qkv must be a torch.Tensor; got ndarray \(conv"):
        torch_backend.multi_head_attention(t, t, t, p)
    with pytest.raises(TypeError, match=r"params.w_qkv must be a numpy.ndarray; got Tensor \(conv"):
        np_backend.multi_head_attention(x, x, x, p.to_torch())
    with pytest.raises(TypeError, match=r"mask must be a numpy.ndarray of bool; got Tensor"):
        np_backend.multi_head_attention(x, x, x, p, torch.ones(2, 2, dtype=torch.bool))


def test_an_array_kind_is_described_by_keyword_only() -> None:
    """Eleven positional fields were one slip from a silent mix-up; each is named now."""
    fields = {f: getattr(NUMPY, f) for f in ("type_name", "array_type", "floats", "bool_dtype")}
    fields |= {f: getattr(NUMPY, f) for f in ("max_abs", "convert", "largest", "values")}
    assert arrays.ArrayKind(**fields).check_array("x", np.ones(2)) == 1.0
    with pytest.raises(TypeError, match="positional"):
        arrays.ArrayKind(*fields.values())
