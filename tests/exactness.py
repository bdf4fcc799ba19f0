"""An audit of exact floating-point comparisons in the tests and the chapters.

Exact equality of two floating-point results is right only where the arithmetic is exact:
copies, views, reshapes, permutations, masking with exact zeros, and one call repeated on
the same inputs in one process. Two routes that round differently (a column block of a
product against the product with the block, one BLAS kernel against another) agree only to
a tolerance (``mha.numerics.tolerance``), and bit-equality seen on one machine fails on another.

:func:`install` wraps the exact comparisons (``np.array_equal``, ``np.array_equiv``,
``np.testing.assert_array_equal``, ``np.testing.assert_equal``, ``torch.equal``, and
``torch.testing.assert_close`` / ``np.testing.assert_allclose`` with zero tolerances). When
one of them compares floating-point arrays from an audited file (a test module, or a
notebook cell), the calling statement must carry a comment ``# exact: <why>`` saying which
exact operation makes the two sides equal. Otherwise the call is recorded; the tests fail on
any record. Integer and boolean comparisons are exact by nature and are not recorded.
"""

from __future__ import annotations

import functools
import linecache
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

MARKER = "# exact:"
TESTS = str(Path(__file__).resolve().parent)

violations: list[str] = []
_installed: list[tuple[Any, str, Any]] = []


def _is_float(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return x.dtype.is_floating_point or x.dtype.is_complex
    try:
        kind = np.asarray(x).dtype.kind
    except (TypeError, ValueError):
        return False
    return kind in "fc"


def _audited(filename: str) -> bool:
    """Test modules and notebook cells (IPython names them after the kernel's temp files)."""
    return filename.startswith(TESTS) or "ipykernel" in filename or filename.startswith("<ipy")


def _statement_lines(frame: Any) -> list[str]:
    """The source lines of the statement that made the call in ``frame``."""
    code, lasti = frame.f_code, frame.f_lasti
    start = end = frame.f_lineno
    for i, (s, e, _, _) in enumerate(code.co_positions()):
        if i == lasti // 2 and s is not None:
            start, end = s, e or s
            break
    # The call may sit inside a longer statement (an ``assert a and b``): look one line
    # either side too, which is where a trailing comment on a wrapped statement lands.
    first, last = max(1, start - 1), end + 1
    return [linecache.getline(code.co_filename, n) for n in range(first, last + 1)]


def _check(name: str, args: tuple[Any, ...]) -> None:
    if not any(_is_float(a) for a in args[:2]):
        return
    frame = sys._getframe(2)
    filename = frame.f_code.co_filename
    if not _audited(filename):
        return
    if any(MARKER in line for line in _statement_lines(frame)):
        return
    where = f"{Path(filename).name}:{frame.f_lineno}"
    source = linecache.getline(filename, frame.f_lineno).strip()
    message = f"{where}: {name} on floating-point arrays without '{MARKER}': {source}"
    if message not in violations:
        violations.append(message)


def _wrap(owner: Any, attr: str, zero_tolerance_only: bool = False) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def audited(*args: Any, **kwargs: Any) -> Any:
        exact = not zero_tolerance_only or (kwargs.get("rtol") == 0 and kwargs.get("atol") == 0)
        if exact:
            _check(f"{owner.__name__}.{attr}", args)
        return original(*args, **kwargs)

    _installed.append((owner, attr, original))
    setattr(owner, attr, audited)


def install() -> list[str]:
    """Wrap the exact comparisons; return the list that collects violations."""
    if _installed:
        return violations
    for owner, attr in (
        (np, "array_equal"),
        (np, "array_equiv"),
        (np.testing, "assert_array_equal"),
        (np.testing, "assert_equal"),
        (torch, "equal"),
    ):
        _wrap(owner, attr)
    _wrap(torch.testing, "assert_close", zero_tolerance_only=True)
    _wrap(np.testing, "assert_allclose", zero_tolerance_only=True)
    return violations


def uninstall() -> None:
    """Restore the original functions."""
    while _installed:
        owner, attr, original = _installed.pop()
        setattr(owner, attr, original)


def report() -> str:
    """The violations, one per line (empty when there are none)."""
    return "\n".join(violations)
