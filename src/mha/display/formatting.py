"""Output for reading: matrices as LaTeX, results as Markdown tables, heads by name.

Chapters show numbers as a reader reads them, never as a Python repr: a small matrix as
a LaTeX ``bmatrix`` inside math, a list of results as a Markdown table (:func:`table` displays
one), a head by the book's name for it (``head_name``), and the library's own code as a code
block (:func:`listing`).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from mha.core._checks import arguments, numpy_arrays


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
        ValueError: if ``a`` is not 1-D or 2-D or holds NaN or infinity, or ``digits`` is
            not in ``[0, 30]``.
        TypeError: if ``a`` is not real numbers or ``digits`` is not an int (a Python or
            NumPy integer, not a bool).
    """
    m = numpy_arrays.float_array("a", a)
    if m.ndim not in (1, 2):
        raise ValueError(f"a must have shape (m, n) or (n,); got {m.ndim}-D shape {m.shape}")
    digits = arguments.size("digits", digits, 0, 31)
    rows = np.atleast_2d(m)
    body = r" \\ ".join(" & ".join(_number(x, digits) for x in row) for row in rows)
    return rf"\begin{{bmatrix}} {body} \end{{bmatrix}}"


def head_name(layer: int, head: int) -> str:
    """The book's name of a head: ``"layer.head"``, both counted from 1.

    Code indexes layers and heads from 0; the book's text, tables and figures count them
    from 1, so the head at code indices ``(0, 2)`` (``weights[0, 2]``) is head ``"1.3"``:
    head 3 of layer 1. A model with one layer still names its heads ``"1.h"``.

    Args:
        layer: the layer's code index, from 0.
        head: the head's code index within its layer, from 0.

    Returns:
        The name, ``f"{layer + 1}.{head + 1}"``.

    Raises:
        TypeError: if ``layer`` or ``head`` is not an int (a NumPy integer is one).
        ValueError: if ``layer`` or ``head`` is negative.
    """
    arguments.check_at_least("layer", layer, 0)
    arguments.check_at_least("head", head, 0)
    return f"{int(layer) + 1}.{int(head) + 1}"


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
        ValueError: if there is no column, a row or ``formats`` does not have one entry per
            column, or a format does not apply to its value.
        TypeError: if ``columns``, ``rows`` or a row is not a list or tuple (a string,
            whose characters would be read as cells, included), or a format is not a
            string or ``None``.
    """
    columns = arguments.items("columns", columns, nonempty=True)
    n = len(columns)
    formats = [None] * n if formats is None else arguments.items("formats", formats)
    if len(formats) != n:
        raise ValueError(f"formats must give one entry per column ({n}); got {len(formats)}")
    for j, f in enumerate(formats):
        if f is not None:
            arguments.text(f"formats[{j}]", f)
    lines = ["| " + " | ".join(_cell(c, None) for c in columns) + " |", "|" + "---|" * n]
    for k, row in enumerate(arguments.items("rows", rows)):
        row = arguments.items(f"rows[{k}]", row)
        if len(row) != n:
            raise ValueError(f"rows[{k}] must have one value per column ({n}); got {len(row)}")
        cells = []
        for j, (v, f) in enumerate(zip(row, formats, strict=True)):
            try:
                cells.append(_cell(v, f))
            except (ValueError, TypeError, IndexError, KeyError) as error:
                raise ValueError(
                    f"formats[{j}] must format rows[{k}][{j}]; {f!r} on {v!r} raised {error!r}"
                ) from None
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Any:
    """A Markdown table that a notebook shows as a table: :func:`markdown_table`, displayed.

    The cells are written with ``str``; for other formats, display
    ``IPython.display.Markdown(markdown_table(columns, rows, formats))``.

    Args:
        columns: the column headers.
        rows: the rows, one value per column.

    Returns:
        An ``IPython.display.Markdown`` object; as the last value of a cell it is displayed.

    Raises:
        ValueError, TypeError: as :func:`markdown_table`.
    """
    from IPython.display import Markdown  # here: only a notebook needs IPython

    return Markdown(markdown_table(columns, rows))


def error_message(
    fn: Callable[[], Any], expected: type[BaseException] | tuple[type[BaseException], ...]
) -> str:
    """Call ``fn``, which must raise ``expected``, and show the error as a reader sees it.

    The chapters show expected errors this way rather than as a traceback, which would
    name the build machine's paths and the library's internals.

    Args:
        fn: the call that should fail, with no arguments (a ``lambda``).
        expected: the exception class (or classes) it should raise.

    Returns:
        Markdown: the error's class and message in a code block.

    Raises:
        RuntimeError: if ``fn`` returns without raising, naming what it returned.
        TypeError: if ``fn`` is not callable or ``expected`` is not an exception class or a
            tuple of them.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {arguments.describe(fn)}")
    classes = expected if isinstance(expected, tuple) else (expected,)
    if not classes or not all(
        isinstance(c, type) and issubclass(c, BaseException) for c in classes
    ):
        got = arguments.describe(expected)
        raise TypeError(f"expected must be an exception class or a tuple of them; got {got}")
    try:
        result = fn()
    except expected as err:
        message = f"{type(err).__name__}: {err}"
        return "```text\n" + message.replace("```", "'''") + "\n```"
    raise RuntimeError(f"expected {expected} to be raised; the call returned {result!r}")


_FORMATTER_NOTE = re.compile(r"\s*# fmt: (?:skip|off|on)\s*$")  # the end of a line


def listing(function: Callable[..., Any]) -> Any:
    """The library's own source of a function or method, without its docstring, to show.

    The chapters show the code they teach this way: read from the package when the book is
    built, so a chapter never holds a copy that could drift from the library. Decorators
    are left out; a decorated function shows its own body. So are the code formatter's
    ``# fmt:`` notes, which say nothing to a reader.

    Args:
        function: a function or method written in Python.

    Returns:
        An ``IPython.display.Markdown`` Python code block, from the ``def`` line on,
        dedented; as the last value of a cell it is displayed.

    Raises:
        TypeError: if ``function`` is not a Python function or method.
    """
    from IPython.display import Markdown  # here: only a notebook needs IPython

    plain = inspect.unwrap(getattr(function, "__func__", function))
    if not inspect.isfunction(plain):
        raise TypeError(
            f"function must be a Python function or method; got {arguments.describe(function)}"
        )
    lines = textwrap.dedent(inspect.getsource(plain)).splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith(("def ", "async "))) :]
    definition = ast.parse("\n".join(lines)).body[0]
    body: list[ast.stmt] = []
    if isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        body = definition.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(body) > 1:
        del lines[first.lineno - 1 : first.end_lineno]  # the docstring
    bare = [(line, _FORMATTER_NOTE.sub("", line)) for line in lines]
    lines = [shown for line, shown in bare if shown.strip() or not line.strip()]
    fence = "`" * 3
    return Markdown(f"{fence}python\n" + "\n".join(lines) + f"\n{fence}")
