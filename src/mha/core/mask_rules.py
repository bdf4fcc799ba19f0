"""How every backend reads a mask: boolean, True = may attend, broadcast from the right.

This module holds the rules, not a mask: each backend builds its masks (``causal_mask``,
``key_padding_mask``) in its own arrays, and reads every mask by the rules below.

A mask broadcasts to ``(B, H, L, S)`` by NumPy's rule, aligned from the right, as
``torch.nn.functional.scaled_dot_product_attention`` reads it: a 2-D mask is ``(L, S)`` (the
same for every batch element and head), a 3-D mask ``(H, L, S)``, and a per-batch mask must
carry its head and query dimensions, ``(B, 1, 1, S)`` for key padding (``key_padding_mask``
builds it) or ``(B, 1, L, S)``. Two readings that broadcasting would take silently against
what was almost surely meant are caught: a 3-D mask whose leading size equals both ``B`` and
``H`` is refused (``ValueError``; pass ``mask[:, None]`` or ``mask[None]``), and a 2-D mask
that looks like key padding while ``B = L`` draws an :class:`AmbiguousMaskWarning` (pass
``mask[None, None]`` to state the ``(L, S)`` reading). A mask that does not broadcast names
the likely intended shape in its error.

A fully masked query row (no key may be attended) gets all-zero attention weights and a zero
attention output in every backend, as in ``scaled_dot_product_attention``.

A causal mask lets query ``i`` attend to the keys at or before its position; where query 0
sits is one of :data:`CAUSAL_ALIGNMENTS` (:func:`causal_offset`).
"""

from __future__ import annotations

# Where query 0 of a causal mask sits: over key 0, or over key S - L (the last query over the
# last key). Every causal mask and tiled causal computation takes one of these two.
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def causal_offset(q_len: int, kv_len: int, align: str) -> int:
    """Where query 0 of a causal mask sits among the keys: query ``i`` at ``i + offset``.

    Query ``i`` may attend to key ``j`` when ``j <= i + offset``. ``"top_left"`` gives 0 (both
    sequences start together); ``"bottom_right"`` gives ``S - L`` (both end together; negative
    when ``L > S``, and then the first ``L - S`` queries see no key).

    Args:
        q_len: query length L.
        kv_len: key length S.
        align: one of :data:`CAUSAL_ALIGNMENTS`, already checked.

    Returns:
        The offset, an int.
    """
    return 0 if align == "top_left" else kv_len - q_len


class AmbiguousMaskWarning(UserWarning):
    """A 2-D mask ``(L, S)`` that could also be meant as a key-padding mask ``(B, S)``.

    The backends warn with it when ``B = L`` and the mask's rows look like key padding; pass
    ``mask[None, None]`` to state the ``(L, S)`` reading.

    Args:
        *args: the message, as for any ``Warning``.
    """
