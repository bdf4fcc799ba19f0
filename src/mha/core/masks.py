"""The mask convention: a boolean mask broadcastable to ``(..., L, S)``, True = may attend.

A mask broadcasts to ``(B, H, L, S)`` by NumPy's rule, aligned from the right, as
``torch.nn.functional.scaled_dot_product_attention`` reads it. Every backend reads masks the
same way and warns with :class:`AmbiguousMaskWarning` when a 2-D mask may mean key padding.
"""

from __future__ import annotations

# Where query 0 of a causal mask sits: over key 0, or over key S - L (the last query over the
# last key). Every causal mask and tiled causal computation takes one of these two.
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


class AmbiguousMaskWarning(UserWarning):
    """A 2-D mask ``(L, S)`` that could also be meant as a key-padding mask ``(B, S)``.

    The backends warn with it when ``B = L`` and the mask's rows look like key padding; pass
    ``mask[None, None]`` to state the ``(L, S)`` reading.

    Args:
        *args: the message, as for any ``Warning``.
    """
