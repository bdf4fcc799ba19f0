"""The base of the cost models' records of counts (:mod:`mha.cost.arithmetic`'s FLOPs,
:mod:`mha.cost.tiled_io`'s elements moved)."""

from __future__ import annotations

from mha.core._checks import arguments


class Counts:
    """Base of a frozen dataclass whose fields are all counts, checked when it is made.

    Raises:
        ValueError: if a count is negative.
        TypeError: if a count is not an int (a Python or NumPy integer, kept as a Python
            ``int``; not a bool).
    """

    def __post_init__(self) -> None:
        arguments.count_fields(self)
