"""The book's shape vocabulary, and shape tables whose expected column is computed.

A layout such as ``"(B, H, L, Dh)"`` names each dimension with a symbol of the notation
table (:data:`SYMBOLS`). :func:`resolve_layout` turns it into integers for given sizes,
so a shape table can derive every expected shape from the symbols and compare it with
the shape an array really has, instead of writing "match" by hand::

    sizes = shape_sizes(batch_size=2, q_len=5, kv_len=7, d_model=16, num_heads=4)
    rows = shape_rows({"weights": ("(B, H, L, S)", weights)}, sizes)
    all(row.matches for row in rows)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mha.core._checks import arguments
from mha.core._checks.arguments import check_int, check_sizes
from mha.core.packing import check_kv_heads
from mha.display import formatting

SYMBOLS: tuple[tuple[str, str, str], ...] = (
    ("B", "batch_size", "batch size: sequences processed together"),
    ("L", "q_len", "query length: positions that ask"),
    ("S", "kv_len", "key/value length: positions that answer"),
    ("D", "d_model", "model width: features per position"),
    ("H", "num_heads", "number of heads"),
    ("Dh", "d_head", "head width, D // H"),
    ("H_kv", "num_kv_heads", "key/value heads: H for multi-head, 1 for multi-query attention"),
)
"""``(symbol, code name, meaning)`` for every size symbol of the book."""

_FACTOR = re.compile(r"^(\d*)([A-Za-z]\w*)?$")


def shape_sizes(
    batch_size: int,
    q_len: int,
    kv_len: int,
    d_model: int,
    num_heads: int,
    num_kv_heads: int | None = None,
) -> dict[str, int]:
    """The value of every symbol of :data:`SYMBOLS` for one configuration.

    Args:
        batch_size: the batch size, B.
        q_len: the query length, L.
        kv_len: the key/value length, S.
        d_model: the model width, D.
        num_heads: H; must divide D.
        num_kv_heads: H_kv; must divide H (``None``: H).

    Returns:
        ``{"B": ..., "L": ..., "S": ..., "D": ..., "H": ..., "Dh": D // H, "H_kv": ...}`` as
        Python ints, in the order of :data:`SYMBOLS`.

    Raises:
        ValueError: if a size is not positive, H does not divide D or H_kv does not
            divide H.
        TypeError: if a size is not an int (a Python or NumPy integer; not a bool).
    """
    check_sizes(d_model, num_heads)
    for name, value in (("batch_size", batch_size), ("q_len", q_len), ("kv_len", kv_len)):
        check_int(name, value)
        if value <= 0:
            raise ValueError(f"{name} must be positive; got {name}={value}")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_kv_heads(num_heads, num_kv_heads)
    sizes = (batch_size, q_len, kv_len, d_model, num_heads, d_model // num_heads, num_kv_heads)
    return {symbol: int(value) for (symbol, _, _), value in zip(SYMBOLS, sizes, strict=True)}


def _resolve_dim(term: str, sizes: Mapping[str, int], layout: str) -> int:
    """One dimension: a product of factors, each ``<int>``, ``<symbol>`` or ``<int><symbol>``."""
    value = 1
    for factor in term.split("*"):
        match = _FACTOR.match(factor.strip())
        if match is None or not any(match.groups()):
            raise ValueError(f"layout {layout!r} has a malformed dimension {term.strip()!r}")
        count, symbol = match.groups()
        if symbol is not None and symbol not in sizes:
            raise ValueError(
                f"layout {layout!r} uses unknown symbol {symbol!r}; known: {sorted(sizes)}"
            )
        value *= int(count or 1) * (sizes[symbol] if symbol is not None else 1)
    return value


def resolve_layout(layout: str, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The integer shape that a symbolic layout names.

    A dimension is a symbol (``"Dh"``), an integer (``"1"``), an integer times a symbol
    (``"3D"``) or a product with ``*`` (``"B*H"``).

    Args:
        layout: a parenthesised, comma-separated layout such as ``"(B, H, L, Dh)"``;
            ``"()"`` is a scalar and ``"(D,)"`` a vector.
        sizes: the value of each symbol, e.g. from :func:`shape_sizes`.

    Returns:
        The shape as a tuple of ints.

    Raises:
        ValueError: if the layout is not parenthesised, a dimension is malformed, a symbol
            is not in ``sizes``, or a size is negative.
        TypeError: if ``layout`` is not a string, ``sizes`` not a dict, or a size not an int
            (a Python or NumPy integer, not a bool).
    """
    text = arguments.text("layout", layout).strip()
    if not isinstance(sizes, Mapping):
        raise TypeError(f"sizes must be a dict of symbol -> size; got {arguments.describe(sizes)}")
    sizes = {k: arguments.size(f"sizes[{k!r}]", v, 0, None) for k, v in sizes.items()}
    if not (text.startswith("(") and text.endswith(")")):
        raise ValueError(f"layout must be parenthesised like '(B, L, D)'; got {layout!r}")
    inner = text[1:-1].strip()
    if not inner:
        return ()
    terms = inner.split(",")
    if terms[-1].strip() == "" and len(terms) > 1:
        terms = terms[:-1]  # "(D,)": the trailing comma of a 1-tuple
    return tuple(_resolve_dim(term, sizes, layout) for term in terms)


@dataclass(frozen=True)
class ShapeRow:
    """One row of a shape table: what a tensor should be and what it is.

    Attributes:
        name: the tensor's name in the table.
        layout: its symbolic layout, such as ``"(B, H, L, S)"``.
        expected: the shape the layout names for the table's sizes.
        actual: the shape the tensor has.
    """

    name: str
    layout: str
    expected: tuple[int, ...]
    actual: tuple[int, ...]

    @property
    def matches(self) -> bool:
        """Whether the actual shape equals the shape derived from the layout."""
        return self.expected == self.actual


def shape_rows(entries: Mapping[str, tuple[str, Any]], sizes: Mapping[str, int]) -> list[ShapeRow]:
    """Compare each array's shape with the shape its layout names.

    Args:
        entries: ``{name: (layout, array)}``; the array may be anything with ``.shape``
            (NumPy array, PyTorch tensor).
        sizes: the value of each symbol, e.g. from :func:`shape_sizes`.

    Returns:
        One :class:`ShapeRow` per entry, in order.

    Raises:
        TypeError: if ``entries`` is not a dict of ``(layout, array)`` pairs or an array has
            no ``shape``, or as :func:`resolve_layout`.
        ValueError: as :func:`resolve_layout`.
    """
    if not isinstance(entries, Mapping):
        raise TypeError(
            f"entries must be a dict {{name: (layout, array)}}; got {arguments.describe(entries)}"
        )
    rows = []
    for name, entry in entries.items():
        if not isinstance(entry, tuple | list) or len(entry) != 2:
            raise TypeError(
                f"entry {name!r} must be a (layout, array) pair; got {arguments.describe(entry)}"
            )
        layout, array = entry
        if not hasattr(array, "shape"):
            raise TypeError(
                f"entry {name!r} must hold an array with .shape; got {type(array).__name__}"
            )
        expected = resolve_layout(layout, sizes)
        rows.append(ShapeRow(name, layout, expected, tuple(int(n) for n in array.shape)))
    return rows


def shape_table(rows: list[ShapeRow]) -> str:
    """A Markdown table of shape rows; the last column is computed from the shapes.

    Built on :func:`mha.display.formatting.markdown_table`.

    Args:
        rows: the rows to list, e.g. from :func:`shape_rows`.

    Returns:
        The table as Markdown text (display it with ``IPython.display.Markdown``).

    Raises:
        TypeError: if ``rows`` is not a list of :class:`ShapeRow`.
    """
    rows = arguments.items("rows", rows)
    for i, r in enumerate(rows):
        arguments.instance(f"rows[{i}]", r, ShapeRow, "a ShapeRow")
    equal = {True: "yes", False: "**no**"}
    return formatting.markdown_table(
        ["tensor", "layout", "expected", "actual", "equal"],
        [
            (r.name, f"`{r.layout}`", f"`{r.expected}`", f"`{r.actual}`", equal[r.matches])
            for r in rows
        ],
    )
