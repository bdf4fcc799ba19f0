"""Output for reading: matrices as LaTeX and results as Markdown tables.

Chapters show numbers as a reader reads them, never as a Python repr: a small matrix as
a LaTeX ``bmatrix`` inside math, a list of results as a Markdown table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def _number(value: float, digits: int) -> str:
    if float(value).is_integer():
        return str(int(value))  # also turns -0.0 into 0
    text = f"{value:.{digits}f}"
    return "0" if float(text) == 0 else text


def latex_matrix(a: Any, digits: int = 3) -> str:
    """A matrix (or a vector, as one row) as a LaTeX ``bmatrix``.

    Integral entries print as integers; the others with ``digits`` decimals.

    Args:
        a: the matrix, NumPy array or torch tensor.
        digits: decimals of the non-integral entries.

    Shape:
        a ``(m, n)`` or ``(n,)``.

    Returns:
        LaTeX text, ``\\begin{bmatrix} ... \\end{bmatrix}``, to place inside math.

    Raises:
        ValueError: if ``a`` is not 1-D or 2-D, or ``digits`` is negative.
        TypeError: if ``a`` is not numeric or ``digits`` is not an int.
    """
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    m = np.asarray(a)
    if not (np.issubdtype(m.dtype, np.number) or m.dtype == np.bool_):
        raise TypeError(f"a must be numeric; got dtype {m.dtype}")
    if m.ndim not in (1, 2):
        raise ValueError(f"a must have shape (m, n) or (n,); got {m.ndim}-D shape {m.shape}")
    if isinstance(digits, bool) or not isinstance(digits, int):
        raise TypeError(f"digits must be an int; got {type(digits).__name__}")
    if digits < 0:
        raise ValueError(f"digits must be at least 0; got digits={digits}")
    rows = np.atleast_2d(m).astype(np.float64)
    body = r" \\ ".join(" & ".join(_number(x, digits) for x in row) for row in rows)
    return rf"\begin{{bmatrix}} {body} \end{{bmatrix}}"


def _cell(value: Any, fmt: str | None) -> str:
    text = str(value) if fmt is None else fmt.format(value)
    return text.replace("|", r"\|").replace("\n", " ")


def markdown_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    formats: Sequence[str | None] | None = None,
) -> str:
    """A Markdown table: one header row, then one line per row.

    Args:
        columns: the column headers.
        rows: the rows, one value per column.
        formats: one ``str.format`` pattern per column (``"{:.3f}"``), or ``None`` for
            ``str``; ``None`` for every column by default.

    Returns:
        Markdown text (``|`` in a cell is escaped).

    Raises:
        ValueError: if a row or ``formats`` does not have one entry per column.
    """
    n = len(columns)
    formats = [None] * n if formats is None else list(formats)
    if len(formats) != n:
        raise ValueError(f"formats must give one entry per column ({n}); got {len(formats)}")
    lines = ["| " + " | ".join(_cell(c, None) for c in columns) + " |", "|" + "---|" * n]
    for k, row in enumerate(rows):
        row = list(row)
        if len(row) != n:
            raise ValueError(f"rows[{k}] must have one value per column ({n}); got {len(row)}")
        lines.append(
            "| " + " | ".join(_cell(v, f) for v, f in zip(row, formats, strict=True)) + " |"
        )
    return "\n".join(lines)
