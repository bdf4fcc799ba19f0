"""The mask convention: a boolean mask broadcastable to ``(..., L, S)``, True = may attend.

A mask broadcasts to ``(B, H, L, S)`` by NumPy's rule, aligned from the right, as
``torch.nn.functional.scaled_dot_product_attention`` reads it. Every backend reads masks the
same way and warns with :class:`AmbiguousMaskWarning` when a 2-D mask may mean key padding.
"""

from __future__ import annotations


class AmbiguousMaskWarning(UserWarning):
    """A 2-D mask ``(L, S)`` that could also be meant as a key-padding mask ``(B, S)``.

    The backends warn with it when ``B = L`` and the mask's rows look like key padding; pass
    ``mask[None, None]`` to state the ``(L, S)`` reading.

    Args:
        *args: the message, as for any ``Warning``.
    """
