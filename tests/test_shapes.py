"""Tests for mha.display.shapes: symbolic layouts resolved to integer shapes, and shape tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mha.backends import np_backend
from mha.core.params import init_params
from mha.display import shapes


def sizes(**overrides: int) -> dict[str, int]:
    kwargs = dict(batch_size=2, q_len=5, kv_len=7, d_model=12, num_heads=3) | overrides
    return shapes.shape_sizes(**kwargs)


def test_shape_sizes_derives_head_width_from_model_width_and_heads() -> None:
    assert sizes() == {"B": 2, "L": 5, "S": 7, "D": 12, "H": 3, "Dh": 4, "H_kv": 3}


def test_shape_sizes_knows_the_key_value_heads_of_grouped_query_attention() -> None:
    got = shapes.shape_sizes(2, 5, 7, 12, 6, num_kv_heads=2)
    assert (got["H"], got["Dh"], got["H_kv"]) == (6, 2, 2)
    assert shapes.resolve_layout("(B, H_kv, S, Dh)", got) == (2, 2, 7, 2)
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads"):
        shapes.shape_sizes(2, 5, 7, 12, 6, num_kv_heads=4)


def test_symbols_cover_exactly_the_sizes_of_shape_sizes() -> None:
    assert [symbol for symbol, _, _ in shapes.SYMBOLS] == list(sizes())


def test_symbols_pair_each_symbol_with_the_conventional_code_name() -> None:
    assert [(symbol, name) for symbol, name, _ in shapes.SYMBOLS] == [
        ("B", "batch_size"),
        ("L", "q_len"),
        ("S", "kv_len"),
        ("D", "d_model"),
        ("H", "num_heads"),
        ("Dh", "d_head"),
        ("H_kv", "num_kv_heads"),
    ]


def test_shape_sizes_accepts_numpy_integers_and_returns_python_ints() -> None:
    got = shapes.shape_sizes(np.int64(2), np.int32(5), np.int64(7), np.int64(12), np.int8(3))
    assert got == {"B": 2, "L": 5, "S": 7, "D": 12, "H": 3, "Dh": 4, "H_kv": 3}
    assert all(type(value) is int for value in got.values())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"num_heads": 5},
            ValueError,
            r"num_heads must divide d_model; got d_model=12, num_heads=5",
        ),
        ({"batch_size": 0}, ValueError, r"batch_size must be positive; got batch_size=0"),
        ({"kv_len": -1}, ValueError, r"kv_len must be positive; got kv_len=-1"),
        ({"q_len": 2.0}, TypeError, r"q_len must be an int; got float 2.0"),
        ({"q_len": True}, TypeError, r"q_len must be an int; got bool True"),
        ({"d_model": 12.0}, TypeError, r"d_model must be an int; got float 12.0"),
    ],
)
def test_shape_sizes_rejects_bad_sizes(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        sizes(**kwargs)


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("(B, L, D)", (2, 5, 12)),
        ("(B, H, L, S)", (2, 3, 5, 7)),
        ("(D, 3D)", (12, 36)),
        ("(B*H, L, S)", (6, 5, 7)),
        ("(D,)", (12,)),
        ("(1, 1, 1, S)", (1, 1, 1, 7)),
        ("()", ()),
        ("  ( Dh , D )  ", (4, 12)),
    ],
)
def test_resolve_layout_evaluates_each_dimension(layout: str, expected: tuple) -> None:
    assert shapes.resolve_layout(layout, sizes()) == expected


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        ("B, L, D", r"layout must be parenthesised like '\(B, L, D\)'; got 'B, L, D'"),
        ("(B, Q, D)", r"layout '\(B, Q, D\)' uses unknown symbol 'Q'; known: \["),
        ("(B, , D)", r"layout '\(B, , D\)' has a malformed dimension ''"),
        ("(B, L-1)", r"layout '\(B, L-1\)' has a malformed dimension 'L-1'"),
        ("(B*, L)", r"layout '\(B\*, L\)' has a malformed dimension 'B\*'"),
    ],
)
def test_resolve_layout_rejects_bad_layouts(layout: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        shapes.resolve_layout(layout, sizes())


@given(
    batch_size=st.integers(1, 4),
    q_len=st.integers(1, 6),
    kv_len=st.integers(1, 6),
    num_heads=st.integers(1, 4),
    d_head=st.integers(1, 4),
)
def test_layouts_predict_the_shapes_numpy_multi_head_attention_returns(
    batch_size: int, q_len: int, kv_len: int, num_heads: int, d_head: int
) -> None:
    d_model = num_heads * d_head
    size = shapes.shape_sizes(batch_size, q_len, kv_len, d_model, num_heads)
    rng = np.random.default_rng(0)
    query = rng.standard_normal((batch_size, q_len, d_model))
    memory = rng.standard_normal((batch_size, kv_len, d_model))
    params = init_params(d_model, num_heads)
    out, weights = np_backend.multi_head_attention(query, memory, memory, params)
    rows = shapes.shape_rows(
        {
            "output": ("(B, L, D)", out),
            "weights": ("(B, H, L, S)", weights),
            "per-head query": ("(B, H, L, Dh)", np_backend.split_heads(query, num_heads)),
            "w_qkv": ("(D, 3D)", params.w_qkv),
        },
        size,
    )
    assert [row.expected for row in rows] == [
        (batch_size, q_len, d_model),
        (batch_size, num_heads, q_len, kv_len),
        (batch_size, num_heads, q_len, d_head),
        (d_model, 3 * d_model),
    ]
    assert all(row.matches for row in rows)


def test_shape_rows_reports_a_mismatch_and_accepts_torch_tensors() -> None:
    rows = shapes.shape_rows(
        {"good": ("(B, L, D)", torch.zeros(2, 5, 12)), "bad": ("(B, S, D)", np.zeros((2, 5, 12)))},
        sizes(),
    )
    assert [(r.name, r.expected, r.actual, r.matches) for r in rows] == [
        ("good", (2, 5, 12), (2, 5, 12), True),
        ("bad", (2, 7, 12), (2, 5, 12), False),
    ]


def test_shape_rows_rejects_an_entry_without_shape() -> None:
    with pytest.raises(TypeError, match=r"entry 'x' must hold an array with .shape; got list"):
        shapes.shape_rows({"x": ("(B,)", [1, 2])}, sizes())


def test_shape_table_marks_only_the_mismatched_row() -> None:
    rows = shapes.shape_rows(
        {"good": ("(D,)", np.zeros(12)), "bad": ("(Dh,)", np.zeros(12))}, sizes()
    )
    lines = shapes.shape_table(rows).splitlines()
    assert lines[0] == "| tensor | layout | expected | actual | equal |"
    assert lines[2] == "| good | `(D,)` | `(12,)` | `(12,)` | yes |"
    assert lines[3] == "| bad | `(Dh,)` | `(4,)` | `(12,)` | **no** |"
    assert len(lines) == 4
