"""The docstrings that the NumPy and PyTorch backends share, written once.

:mod:`mha.backends.np_backend` and :mod:`mha.backends.torch_backend` have the same functions,
arguments and rules. Each public function of theirs that the other also has takes its
docstring from :data:`DOCS` through :func:`shared`, with the words that differ filled in:
``{array}`` ("array" or "tensor"), ``{arrays}`` ("NumPy arrays" or "PyTorch tensors") and
the backend's own sentences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

NUMPY = {"array": "array", "arrays": "NumPy arrays"}
TORCH = {"array": "tensor", "arrays": "PyTorch tensors"}


def shared(name: str, words: dict[str, str], **more: str) -> Callable[[_F], _F]:
    """A decorator that gives a function the docstring ``DOCS[name]``, filled in.

    Args:
        name: the function's name in :data:`DOCS`.
        words: the backend's words (:data:`NUMPY` or :data:`TORCH`).
        **more: the function's own sentences, by placeholder.

    Returns:
        The decorator; it returns the function itself, with ``__doc__`` set.
    """

    def document(fn: _F) -> _F:
        fn.__doc__ = DOCS[name].format(**words, **more)
        return fn

    return document


CAUSAL_MASK = """\
Boolean causal mask: query ``i`` may attend to the keys at or before its position.

    With ``L = S`` both alignments give the lower triangle, keys ``j <= i``. They differ
    when ``L != S`` (:func:`mha.core.mask_rules.causal_offset`):

    - ``"top_left"`` (the default): query ``i`` sits at position ``i``, and sees keys
      ``j <= i``. This is ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``
      and ``torch.nn.attention.bias.causal_upper_left``.
    - ``"bottom_right"``: the queries are the *last* ``L`` of ``S`` positions, query ``i``
      at position ``S - L + i``, and it sees keys ``j <= S - L + i``. This is what decoding
      with a key/value cache needs (the new queries come after the cached keys), and
      ``torch.nn.attention.bias.causal_lower_right``. With ``L > S`` its first ``L - S``
      rows are fully masked.

    Args:
        q_len: query length L.
        kv_len: key length S (defaults to L).{device_arg}
        align: ``"top_left"`` or ``"bottom_right"``, where query 0 sits.

    Shape:
        Returns ``(L, S)``.

    Returns:
        A boolean {array}, True on and below the diagonal.

    Raises:
        ValueError: if a length is not positive{device_value}, or ``align`` is not one of
            the two.
        TypeError: if a length is not an int{device_type}.
    """

KEY_PADDING_MASK = """\
Boolean mask letting each batch element attend only to its first ``lengths[b]`` keys.

    Args:
        lengths: number of real (non-padding) keys per batch element, each in ``[0, S]``.
        kv_len: key length S.

    Shape:
        lengths ``(B,)``; returns ``(B, 1, 1, S)``, which broadcasts to ``(B, H, L, S)``
        (``B = 0`` for an empty list gives an empty mask).

    Returns:
        A boolean {array}, True for the first ``lengths[b]`` keys of row ``b``.

    Raises:
        ValueError: if ``lengths`` is not 1-D or a length is outside ``[0, S]``.
        TypeError: if ``lengths`` are not integers{lengths_type} or ``kv_len`` is not an int.
    """

WITH_CAUSAL = """\
``mask`` and the causal mask aligned at ``causal`` together, as one boolean mask (no checks).

    What a form that writes every score attends under when the layer is causal.

    Args:
        mask: boolean, True = may attend, or ``None``.
        causal: ``None`` (``mask`` is returned as it is), or where the causal diagonal sits:
            ``"top_left"`` or ``"bottom_right"`` (the ``align`` of :func:`causal_mask`).
        q_len: query length L.
        kv_len: key length S.{device_arg}

    Shape:
        mask broadcastable to ``(..., L, S)``. Returns ``(..., L, S)``, or ``(L, S)``
        without ``mask``.

    Returns:
        ``mask & causal_mask(L, S, align=causal)``, a boolean {array}, or ``mask``.
    """

SOFTMAX = """\
Masked softmax over the last axis ({softmax_note}).

    Masked entries get weight exactly 0; a row with every entry masked gets all zeros{zero_grad}.
    Subtracting the row maximum keeps large logits finite.{low_precision}

    Args:
        scores: the scores, a floating {array}.
        mask: optional boolean keep-mask (True = may attend).

    Shape:
        scores ``(..., L, S)``; mask broadcastable to it. Returns ``(..., L, S)``.

    Returns:
        The weights, a new {array} of ``scores``' dtype{differentiable}; rows sum to 1, fully
        masked rows are 0.

    Raises:
        ValueError: if ``mask`` does not broadcast or ``scores`` is not finite.
        TypeError: if ``scores`` is not a float {array} or ``mask`` is not boolean.
    """

SDPA = """\
``softmax(Q K^T / sqrt(Dh)) V`` with an optional boolean mask.

    Args:
        query: queries.
        key: keys, the same width as ``query``.
        value: values, the same length as ``key``.
        mask: boolean, True = may attend; broadcastable to ``(..., L, S)``.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``.
        Returns output ``(..., L, Dv)`` and weights ``(..., L, S)``.

    Returns:
        ``(output, weights)``, {arrays} of the inputs' dtype. The weights' leading
        dimensions broadcast those of query, key and mask; the output's also value's.

    Raises:
        ValueError: on mismatched shapes, empty sequences, a head width ``Dh`` of 0 (the
            last dimension of query and key), a mask that does not broadcast, non-finite
            inputs, or scores that overflow the dtype.
        TypeError: on non-float or mixed dtypes, a non-boolean mask{kind_errors}.
    """

SPLIT_HEADS = """\
Split the model width into heads{split_note}.

    Args:
        x: an {array} whose width is D.
        num_heads: number of heads H; must divide D.

    Shape:
        ``(B, L, D)`` -> ``(B, H, L, Dh)``.

    Returns:
        Head ``h`` is the column block ``h * Dh : (h + 1) * Dh`` of ``x``.

    Raises:
        ValueError: if ``x`` is not 3-D or H does not divide its width.
    """

MERGE_HEADS = """\
Concatenate the heads back into the model width (the inverse of ``split_heads``).

    Args:
        x: per-head {arrays} stacked along dimension 1.

    Shape:
        ``(B, H, L, Dh)`` -> ``(B, L, D)``.

    Returns:
        The heads side by side, an {array} of width ``H * Dh``.

    Raises:
        ValueError: if ``x`` is not 4-D.
    """

LINEAR = """\
``x W + b``, the projection every form applies (no checks).

    Args:
        x: the inputs.
        w: the weight, multiplied on the right.
        b: the bias, or ``None``.

    Shape:
        x ``(..., D_in)``, w ``(D_in, D_out)``, b ``(D_out,)``. Returns ``(..., D_out)``.

    Returns:
        A new {array}.
    """

MULTI_HEAD_ATTENTION = """\
``Concat(head_1, ..., head_H) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    Three steps: the arguments are checked (``mha.core._checks.layer``), one form
    computes, and the result's range is checked. The forms are mathematically identical
    (:data:`FORMS`): ``"per_head"`` (:func:`attention_per_head`), ``"fused"``
    (:func:`attention_fused`), ``"packed"`` (:func:`attention_packed`){tiled_form}.
    Grouped-query attention (``num_kv_heads < num_heads``) is the general case of each.
    {backend_note}

    Args:
        query: queries.
        key: keys (pass ``query`` again for self-attention).
        value: values.
        params: the layer's parameters, {arrays} of the inputs' dtype{device}.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)`` by NumPy's rule,
            aligned from the right: ``(L, S)`` for every batch element and head, ``(H, L, S)``
            per head, ``(B, 1, 1, S)`` (:func:`key_padding_mask`) or ``(B, 1, L, S)`` per
            batch element. A ``(B, S)`` or ``(B, L, S)`` mask is *not* read per batch
            element; a 3-D mask whose leading size equals both B and H is refused, and a
            padding-like 2-D mask with B = L warns (:mod:`mha.core.mask_rules`).
        causal: let query ``i`` attend only to the keys at or before its position, as the
            mask of :func:`causal_mask` (with ``align``), on top of ``mask``. The layer
            knows it is causal, instead of reading that from a mask array: {causal_note}
            The result equals that of passing ``mask & causal_mask(L, S, align=align)``
            instead, to rounding.
        align: where the queries sit when ``causal``, as in :func:`causal_mask`:
            ``"top_left"`` (query ``i`` at position ``i``; PyTorch's ``is_causal=True``) or
            ``"bottom_right"`` (the queries are the last ``L`` of the ``S`` positions: what a
            cache needs, where ``S`` counts the cached positions). Only with ``causal``.
        form: one of :data:`FORMS`.
        need_weights: {need_weights}
        cache: a :class:`mha.core.kv_cache.KVCache` of this layer's projected keys and values
            ({cache_arrays}): the projections of ``key`` and ``value`` (the new positions)
            are appended to it, and the queries attend to everything it then holds. Its
            batch size, ``num_kv_heads``, ``d_head`` and dtype must match, the mask must cover
            its positions and the new ones, and the new ones must fit its capacity; not with
            ``"per_head"``. The call is atomic: the new positions are appended only once
            every check, the output's range included, has passed, so a refused call leaves
            the cache's length, contents and ``max_abs`` as they were. The cached keys and
            values are not read again (``cache.max_abs`` bounds them); NaN or infinity that
            reached them anyway (written into its views), and finite entries beyond
            ``cache.max_abs`` that make the output overflow, are reported naming the cache:
            a non-finite output is never returned.{autograd_cache}
        rotary: rotary positions (:class:`mha.core.rotary.Rotary`), or ``None`` for none.
            Every form turns the queries and keys by their positions after the projections
            (:func:`mha.core.rotary.rotated`); the values are never turned. Query ``i`` and
            key ``j`` sit at positions ``i`` and ``j``, both from 0 for cross-attention too;
            with a cache, from its length on: the keys are turned before they are cached.
            ``d_head`` must be even.

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)`` (with a cache: ``(B, n, D)``, the
        ``n`` new positions, and ``S`` is the cache's length after appending them). Returns
        output ``(B, L, D)`` and weights ``(B, H, L, S)`` (or ``None`` when
        ``need_weights`` is False).

    Returns:
        ``(output, weights)``, {arrays} of the inputs' dtype{autograd_result}; ``weights`` is
        ``None`` when ``need_weights`` is False.

    Raises:
        ValueError: on mismatched shapes, empty sequences, a mask that does not
            broadcast, non-finite inputs, an ``align`` other than ``"top_left"`` and
            ``"bottom_right"`` or ``"bottom_right"`` without ``causal``, a ``form`` not in
            :data:`FORMS`{tiled_errors}, an
            output that would overflow, a cache that does not fit the layer or the call,
            is full, holds NaN or infinity, or holds entries beyond its ``max_abs`` that
            overflow the output, or an odd ``d_head`` with ``rotary``.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, a ``causal`` that is not
            a bool, wrong ``params``, a cache that is not a ``KVCache`` of {cache_arrays}, or
            a ``rotary`` that is not a ``Rotary``.
    """

LAYER_NORM = """\
Layer normalisation over the last axis (the model width), as ``torch.nn.LayerNorm``.

    Args:
        x: the {array} to normalise over its last dimension.
        weight: the scale ``gamma``, or ``None`` for ones.
        bias: the shift ``beta``, or ``None`` for zeros.
        eps: added to the variance before the square root.

    Shape:
        x ``(..., D)``, weight and bias ``(D,)``. Returns ``(..., D)``.

    Returns:
        ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased variance, as in PyTorch).

    Raises:
        ValueError: if ``eps`` is not positive and finite, ``weight``/``bias`` are not
            ``(D,)``, an input is not finite, or a row of ``x`` spreads so widely that its
            variance would overflow (``D (max - min)^2`` reaches the dtype's largest value).
        TypeError: on non-float or mixed dtypes, a non-number ``eps`` (such as an {array}){devices}.
    """

ATTENTION_BLOCK = """\
A residual block around self-attention, with layer normalisation after or before it.

    - ``norm_first=False`` (post-norm, Vaswani et al.): ``LayerNorm(X + MultiHead(X))``.
    - ``norm_first=True`` (pre-norm, GPT-2 and most later models):
      ``X + MultiHead(LayerNorm(X))``; the residual path carries ``X`` unchanged, and the
      output is not normalised.

    The argument has the name and meaning of ``norm_first`` in
    ``torch.nn.TransformerEncoderLayer``.

    Args:
        x: the block's input {array}, which is the queries, keys and values.
        params: the attention layer's parameters, of the kind and dtype of ``x``{device}.
        mask: optional boolean {array}, True = may attend; broadcastable to ``(B, H, L, L)``.
        ln_weight: the layer norm's scale (``None``: ones).
        ln_bias: the layer norm's shift (``None``: zeros).
        eps: added to the variance in the layer norm.
        form: the form of :func:`multi_head_attention`, one of :data:`FORMS`.
        norm_first: normalise before the attention (pre-norm) instead of after the sum.
        rotary: rotary positions for the attention (:func:`multi_head_attention`), or
            ``None``.

    Shape:
        x ``(B, L, D)``. Returns output ``(B, L, D)`` and weights ``(B, H, L, L)``.

    Returns:
        ``(output, weights)``: the block's output (the normalised residual sum with
        post-norm, the residual sum with pre-norm) and the attention weights.

    Raises:
        TypeError: if ``norm_first`` is not a bool; and the errors of
            :func:`multi_head_attention` and :func:`layer_norm`.
    """

DOCS = {
    "causal_mask": CAUSAL_MASK,
    "key_padding_mask": KEY_PADDING_MASK,
    "with_causal": WITH_CAUSAL,
    "softmax": SOFTMAX,
    "scaled_dot_product_attention": SDPA,
    "split_heads": SPLIT_HEADS,
    "merge_heads": MERGE_HEADS,
    "linear": LINEAR,
    "multi_head_attention": MULTI_HEAD_ATTENTION,
    "layer_norm": LAYER_NORM,
    "attention_block": ATTENTION_BLOCK,
}
