"""TODO."""

from __future__ import annotations


class AmbiguousMaskWarning(UserWarning):
    """A 2-D mask ``(L, S)`` that could also be meant as a key-padding mask ``(B, S)``."""
