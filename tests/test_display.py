"""Matrices as LaTeX and results as Markdown tables."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from mha.display import formatting


def test_latex_matrix_prints_integers_as_integers_and_the_rest_with_digits() -> None:
    text = formatting.latex_matrix(np.array([[1.0, -0.0], [0.5, 2 / 3]]), digits=2)
    assert text == r"\begin{bmatrix} 1 & 0 \\ 0.50 & 0.67 \end{bmatrix}"


def test_latex_matrix_shows_a_vector_as_one_row_and_accepts_tensors() -> None:
    assert (
        formatting.latex_matrix(torch.tensor([1, 2, 3]))
        == r"\begin{bmatrix} 1 & 2 & 3 \end{bmatrix}"
    )


def test_latex_matrix_never_prints_minus_zero_for_a_tiny_negative() -> None:
    assert formatting.latex_matrix(np.array([-1e-9, 0.25]), digits=3) == (
        r"\begin{bmatrix} 0 & 0.250 \end{bmatrix}"
    )


@pytest.mark.parametrize(
    ("a", "digits", "error", "match"),
    [
        (np.ones((2, 2, 2)), 3, ValueError, r"a must have shape \(m, n\) or \(n,\); got 3-D"),
        (np.array(["a"]), 3, TypeError, "a must be a real numeric array; got dtype <U1"),
        (np.ones(2), -1, ValueError, "digits must be at least 0; got digits=-1"),
        (np.ones(2), 1.5, TypeError, "digits must be an int; got float"),
    ],
)
def test_latex_matrix_rejects_bad_input(a, digits, error, match) -> None:
    with pytest.raises(error, match=match):
        formatting.latex_matrix(a, digits)


def test_head_name_counts_layers_and_heads_from_one() -> None:
    assert formatting.head_name(0, 2) == "1.3"  # code indices (0, 2): head 3 of layer 1
    assert formatting.head_name(1, 3) == "2.4"
    assert formatting.head_name(np.int64(5), np.intp(11)) == "6.12"  # np.unravel_index's ints
    assert formatting.head_name(9, 10) != formatting.head_name(10, 9)  # "10.11" and "11.10"


@pytest.mark.parametrize(
    ("layer", "head", "error", "match"),
    [
        (-1, 0, ValueError, "layer must be at least 0; got layer=-1"),
        (0, -2, ValueError, "head must be at least 0; got head=-2"),
        (0.0, 1, TypeError, "layer must be an int; got float"),
        (0, True, TypeError, "head must be an int; got bool"),
    ],
)
def test_head_name_rejects_indices_that_are_not_counts(layer, head, error, match) -> None:
    with pytest.raises(error, match=match):
        formatting.head_name(layer, head)


def test_markdown_table_formats_each_column_and_escapes_bars() -> None:
    table = formatting.markdown_table(
        ["seed", "share"], [(0, 0.12345), ("a|b", 1.0)], formats=[None, "{:.2f}"]
    )
    assert table.splitlines() == [
        "| seed | share |",
        "|---|---|",
        "| 0 | 0.12 |",
        r"| a\|b | 1.00 |",
    ]


def test_markdown_table_rejects_rows_and_formats_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match=r"rows\[1\] must have one value per column \(2\); got 1"):
        formatting.markdown_table(["a", "b"], [(1, 2), (3,)])
    with pytest.raises(ValueError, match=r"formats must give one entry per column \(2\); got 1"):
        formatting.markdown_table(["a", "b"], [], formats=["{}"])


def test_error_message_shows_the_class_and_message_of_the_expected_error() -> None:
    text = formatting.error_message(lambda: int("x"), ValueError)
    assert text.startswith("```text\nValueError: invalid literal") and text.endswith("\n```")
    with pytest.raises(RuntimeError, match="the call returned 3"):
        formatting.error_message(lambda: 3, ValueError)
    with pytest.raises(KeyError):  # an error of another kind is not swallowed
        formatting.error_message(lambda: {}["k"], ValueError)


def test_listing_shows_the_source_from_def_on_dedented_without_docstring() -> None:
    from mha.backends import np_backend, tiled

    shown = formatting.listing(np_backend.attention_per_head).data
    assert shown.startswith("```python\ndef attention_per_head(") and shown.endswith("\n```")
    assert '"""' not in shown and "for h in range(params.num_heads):" in shown
    # the source wraps its signature under "# fmt: skip"; the reader sees no formatter note
    assert "# fmt:" in inspect.getsource(np_backend.attention_per_head)
    assert "# fmt:" not in shown and "\n):\n" in shown
    method = formatting.listing(tiled.RunningRows.update).data.splitlines()
    assert method[1].startswith("def update(") and method[-2] == "    self.row_max = new_max"
    assert '"""' not in "\n".join(method)
    # a decorated function: its own body, not the decorator's wrapper
    wrapped = formatting.listing(np_backend.multi_head_attention).data
    assert wrapped.startswith("```python\ndef multi_head_attention(") and "_FORMS[form]" in wrapped
    with pytest.raises(TypeError, match="function must be a Python function or method; got"):
        formatting.listing(np.exp)


def test_table_displays_the_markdown_table_of_its_rows() -> None:
    shown = formatting.table(["head", "score"], [("1.2", 0.5)])
    assert type(shown).__name__ == "Markdown"
    assert shown.data == "| head | score |\n|---|---|\n| 1.2 | 0.5 |"
    with pytest.raises(ValueError, match=r"rows\[0\] must have one value per column \(2\)"):
        formatting.table(["a", "b"], [(1,)])
