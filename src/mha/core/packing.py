"""Layouts of the query, key and value weights: per head, fused, packed, and PyTorch's.

One multi-head attention layer has ``3H`` small projections ``W_i^Q, W_i^K, W_i^V`` of
shape ``(D, Dh)``. This package stores them as one right-multiplied ``(D, 3D)`` matrix
``[W_q | W_k | W_v]``, where ``W_q = [W_0^Q | ... | W_{H-1}^Q]`` puts head ``h`` in columns
``h * Dh : (h + 1) * Dh``. ``torch.nn.MultiheadAttention`` stores the same numbers as the
left-multiplied ``in_proj_weight`` of shape ``(3D, D)``: its transpose, so head ``h``'s query
block is rows ``h * Dh : (h + 1) * Dh``. The output projection ``W^O`` reads head ``h``'s
output with its rows ``h * Dh : (h + 1) * Dh``.

Grouped-query attention (``H_kv`` key/value heads for ``H`` query heads, ``H_kv`` dividing
``H``) narrows the key and value blocks to ``H_kv Dh`` columns each: the packed weights are
``(D, D + 2 H_kv Dh)``, key/value head ``g`` owns columns ``g * Dh : (g + 1) * Dh`` of
``W_k`` and ``W_v``, and serves query heads ``g G ... (g + 1) G - 1``, ``G = H / H_kv``.
Multi-head attention is ``H_kv = H`` (``(D, 3D)``), multi-query attention ``H_kv = 1``.
PyTorch's ``nn.MultiheadAttention`` has only the square layout.

This module is the one place that knows these layouts: :class:`mha.core.params.MHAParams`, the
PyTorch module and its converters (:mod:`mha.backends.module`) and the analyses of single heads
take their slices and transposes from here. The helpers move between the layouts and say
which column belongs to which head and projection. They accept NumPy arrays and PyTorch
tensors and return the same kind (views where the layouts allow).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.core._checks import arguments

Array = Any  # a numpy.ndarray or a torch.Tensor

PROJECTIONS = ("q", "k", "v")
PROJECTION_RUNS = (*PROJECTIONS, "kv")


def check_kv_heads(num_heads: int, num_kv_heads: int) -> None:
    """Check that ``num_kv_heads`` is a positive int dividing ``num_heads``.

    Args:
        num_heads: H, the query heads.
        num_kv_heads: H_kv, the key/value heads.

    Raises:
        ValueError: if a size is not positive or ``num_kv_heads`` does not divide
            ``num_heads``.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
    """
    num_heads = arguments.size("num_heads", num_heads)
    num_kv_heads = arguments.size("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_kv_heads must divide num_heads; got num_heads={num_heads}, "
            f"num_kv_heads={num_kv_heads}"
        )


def kv_width(d_model: int, num_heads: int, num_kv_heads: int | None = None) -> int:
    """``H_kv Dh``: the columns of each of ``W_k`` and ``W_v`` (``D`` for multi-head attention).

    Args:
        d_model: model width D.
        num_heads: H; must divide D.
        num_kv_heads: H_kv; must divide H (``None``: H, multi-head attention).

    Returns:
        ``num_kv_heads * d_model // num_heads``, a Python ``int``.

    Raises:
        ValueError: if the sizes are not positive, H does not divide D or H_kv does not
            divide H.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
    """
    D, H, H_kv = arguments.layer_sizes(d_model, num_heads, num_kv_heads)
    return H_kv * (D // H)


def _check_packed(name: str, w: Any, transposed: bool = False) -> None:
    """Check that ``w`` is a ``(D, 3D)`` array (``(3D, D)`` when ``transposed``)."""
    _check_array(name, w)
    rows, cols = (3, 1) if transposed else (1, 3)
    if w.ndim != 2 or rows * w.shape[1] != cols * w.shape[0] or w.shape[0] == 0:
        rule = "(3D, D)" if transposed else "(D, 3D)"
        hint = "" if transposed else " (grouped-query weights: repeat_kv_heads makes them so)"
        raise ValueError(f"{name} must have shape {rule}; got {tuple(w.shape)}{hint}")


def _permute(x: Array, axes: tuple[int, ...]) -> Array:
    if isinstance(x, np.ndarray):
        return x.transpose(axes)
    return x.permute(*axes)


def _check_array(name: str, w: Any) -> None:
    if not hasattr(w, "shape") or not hasattr(w, "ndim") or not hasattr(w, "reshape"):
        raise TypeError(f"{name} must be a numpy.ndarray or torch.Tensor; got {type(w).__name__}")


def _check_matrix(name: str, w: Any) -> None:
    _check_array(name, w)
    if w.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix; got {w.ndim}-D shape {tuple(w.shape)}")


def linear_transpose(w: Array) -> Array:
    """A linear map's weight in the other layout, ``(in, out)`` <-> ``(out, in)`` (no copy).

    This package stores ``(in, out)`` and computes ``x @ w``; ``torch.nn.Linear`` (and
    ``nn.MultiheadAttention``'s ``out_proj``) stores ``(out, in)`` and computes
    ``x @ weight.T``. The transpose converts either way; it is how ``W^O`` becomes
    ``out_proj.weight`` and back.

    Args:
        w: a weight in either layout.

    Shape:
        ``(m, n)`` -> ``(n, m)``.

    Returns:
        ``w.T``, a view of ``w``.

    Raises:
        ValueError: if ``w`` is not 2-D.
        TypeError: if ``w`` is not an array or tensor.
    """
    _check_matrix("w", w)
    return w.T  # (in, out) <-> (out, in)


def to_in_proj_weight(w_qkv: Array) -> Array:
    """PyTorch's ``in_proj_weight`` from our packed weights (a transpose, no copy).

    ``x @ w_qkv == x @ to_in_proj_weight(w_qkv).T``, which is how
    ``torch.nn.MultiheadAttention`` applies its input projection.

    Args:
        w_qkv: our packed ``[W_q | W_k | W_v]``.

    Shape:
        ``(D, 3D)`` -> ``(3D, D)``.

    Returns:
        ``w_qkv.T``, a view of ``w_qkv``.

    Raises:
        ValueError: if ``w_qkv`` is not ``(D, 3D)``.
        TypeError: if ``w_qkv`` is not an array or tensor.
    """
    _check_packed("w_qkv", w_qkv)
    return w_qkv.T  # (D, 3D) -> (3D, D)


def from_in_proj_weight(in_proj_weight: Array) -> Array:
    """Our packed ``(D, 3D)`` weights from PyTorch's ``in_proj_weight`` (a transpose).

    Args:
        in_proj_weight: ``nn.MultiheadAttention``'s packed input projection.

    Shape:
        ``(3D, D)`` -> ``(D, 3D)``.

    Returns:
        ``in_proj_weight.T``, a view of it.

    Raises:
        ValueError: if ``in_proj_weight`` is not ``(3D, D)``.
        TypeError: if it is not an array or tensor.
    """
    _check_packed("in_proj_weight", in_proj_weight, transposed=True)
    return in_proj_weight.T  # (3D, D) -> (D, 3D)


def split_head_blocks(w_qkv: Array, num_heads: int) -> Array:
    """Cut packed weights into the ``3H`` per-head blocks of the per-head form.

    ``blocks[p, h]`` is the ``(D, Dh)`` projection of head ``h`` for ``p`` in
    (0, 1, 2) = (query, key, value), so ``x @ blocks[0, h]`` is head ``h``'s queries.

    Args:
        w_qkv: our packed ``[W_q | W_k | W_v]``.
        num_heads: number of heads H; must divide D.

    Shape:
        ``(D, 3D)`` -> ``(3, H, D, Dh)``.

    Returns:
        The blocks, a view of ``w_qkv`` (permuted axes, not contiguous).

    Raises:
        ValueError: if ``w_qkv`` is not ``(D, 3D)`` or H does not divide D.
        TypeError: if ``w_qkv`` is not an array or tensor, or ``num_heads`` is not an int.
    """
    _check_packed("w_qkv", w_qkv)
    D, H, _ = arguments.layer_sizes(w_qkv.shape[0], num_heads)
    blocks = w_qkv.reshape(D, 3, H, D // H)  # (D, 3D) -> (D, 3, H, Dh)
    return _permute(blocks, (1, 2, 0, 3))  # -> (3, H, D, Dh)


def merge_head_blocks(blocks: Array) -> Array:
    """Pack ``3H`` per-head blocks into one ``(D, 3D)`` matrix (inverse of ``split_head_blocks``).

    Args:
        blocks: ``blocks[p, h]`` the ``(D, Dh)`` projection ``p`` of head ``h``.

    Shape:
        ``(3, H, D, Dh)`` -> ``(D, 3D)``.

    Returns:
        The packed weights ``[W_q | W_k | W_v]``, a new contiguous array or tensor.

    Raises:
        ValueError: if ``blocks`` is not ``(3, H, D, Dh)`` with ``H * Dh == D``.
        TypeError: if ``blocks`` is not an array or tensor.
    """
    _check_array("blocks", blocks)
    shape = tuple(blocks.shape)
    if len(shape) != 4 or shape[0] != 3 or shape[1] * shape[3] != shape[2] or shape[2] == 0:
        raise ValueError(f"blocks must have shape (3, H, D, Dh) with H * Dh == D; got {shape}")
    D = shape[2]
    w = _permute(blocks, (2, 0, 1, 3))  # (3, H, D, Dh) -> (D, 3, H, Dh)
    return w.reshape(D, 3 * D)  # -> (D, 3D)


def head_span(d_model: int, num_heads: int, h: int) -> slice:
    """Head ``h``'s ``Dh`` positions along a width-D axis: ``slice(h * Dh, (h + 1) * Dh)``.

    The columns of head ``h`` in ``W_q``, ``W_k``, ``W_v`` (and its entries of their
    biases), and its rows of ``W^O``.

    Args:
        d_model: model width D.
        num_heads: number of heads H.
        h: head index in ``[0, H)``.

    Returns:
        ``slice(h * Dh, (h + 1) * Dh)``, of Python ints.

    Raises:
        ValueError: if ``h`` is not in ``[0, H)``, a size is not positive or H does not
            divide D.
        TypeError: if ``h`` or a size is not an int (a Python or NumPy integer, not a bool).
    """
    D, H, _ = arguments.layer_sizes(d_model, num_heads)
    if not arguments.integral(h):
        raise TypeError(f"h must be an int; got {arguments.describe(h)}")
    if not 0 <= h < H:
        raise ValueError(f"h must be in [0, num_heads={H}); got h={h}")
    Dh = D // H
    return slice(int(h) * Dh, (int(h) + 1) * Dh)


def projection_columns(d_model: int, projection: str, *, kv_cols: int | None = None) -> slice:
    """The columns of the packed weights (entries of ``b_qkv``) of one or two projections.

    Args:
        d_model: model width D.
        projection: ``"q"``, ``"k"`` or ``"v"`` (one block), or ``"kv"`` (the key and
            value blocks side by side, which the packed form projects together in
            cross-attention).
        kv_cols: the width ``H_kv Dh`` of each of the key and value blocks
            (:func:`kv_width`; ``None``: D, multi-head attention).

    Returns:
        The query block ``slice(0, D)``; the key block ``slice(D, D + kv_cols)``; the value
        block after it; ``"kv"`` both.

    Raises:
        ValueError: on an unknown projection or a non-positive width.
        TypeError: if ``d_model`` or ``kv_cols`` is not an int (a Python or NumPy integer,
            not a bool).
    """
    d_model = arguments.size("d_model", d_model)
    kv_cols = d_model if kv_cols is None else arguments.size("kv_cols", kv_cols)
    arguments.choice("projection", projection, PROJECTION_RUNS)
    starts = {"q": 0, "k": d_model, "v": d_model + kv_cols, "kv": d_model}
    widths = {"q": d_model, "k": kv_cols, "v": kv_cols, "kv": 2 * kv_cols}
    return slice(starts[projection], starts[projection] + widths[projection])


def head_columns(
    d_model: int, num_heads: int, projection: str, h: int, *, num_kv_heads: int | None = None
) -> slice:
    """The columns of the packed weights (rows of ``in_proj_weight``) of one head's block.

    Args:
        d_model: model width D.
        num_heads: number of query heads H.
        projection: ``"q"``, ``"k"`` or ``"v"``.
        h: a query head in ``[0, H)`` for ``"q"``; a key/value head in ``[0, H_kv)`` for
            ``"k"`` and ``"v"``.
        num_kv_heads: H_kv (``None``: H).

    Returns:
        The block's ``Dh`` columns.

    Raises:
        ValueError: on an unknown projection, a head out of range, or bad sizes.
        TypeError: if ``h`` or a size is not an int (a Python or NumPy integer, not a bool).
    """
    arguments.choice("projection", projection, PROJECTIONS)
    D, H, H_kv = arguments.layer_sizes(d_model, num_heads, num_kv_heads)
    offset = projection_columns(D, projection, kv_cols=H_kv * (D // H)).start
    heads = H if projection == "q" else H_kv
    span = head_span(heads * (D // H), heads, h)
    return slice(offset + span.start, offset + span.stop)


def split_head_rows(w: Array, num_heads: int) -> Array:
    """Cut a matrix's rows into the ``H`` blocks of ``Dh`` rows, one per head (a view).

    Block ``h`` of ``W^O`` is what head ``h``'s output is multiplied by; block ``h`` of an
    ``nn.Linear`` query weight ``(D, D)`` is head ``h``'s query projection, transposed.

    Args:
        w: a matrix whose D rows belong to the heads in order.
        num_heads: number of heads H; must divide D.

    Shape:
        ``(D, n)`` -> ``(H, Dh, n)``.

    Returns:
        The blocks, a view of ``w``.

    Raises:
        ValueError: if ``w`` is not 2-D or H does not divide its number of rows.
        TypeError: if ``w`` is not an array or tensor, or ``num_heads`` is not an int.
    """
    _check_matrix("w", w)
    n = w.shape[1]
    D, H, _ = arguments.layer_sizes(w.shape[0], num_heads)
    return w.reshape(H, D // H, n)  # (D, n) -> (H, Dh, n)


def column_owner(
    d_model: int, num_heads: int, num_kv_heads: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Which projection and which head each column of the packed weights belongs to.

    Args:
        d_model: model width D.
        num_heads: number of query heads H.
        num_kv_heads: H_kv (``None``: H).

    Shape:
        Returns two ``(D + 2 H_kv Dh,)`` arrays.

    Returns:
        ``(projection, head)``: ``projection[c]`` in (0, 1, 2) = (query, key, value), and
        ``head[c]`` the query head (query columns) or key/value head (the others).

    Raises:
        ValueError, TypeError: if the sizes are not positive ints with H dividing D and
            H_kv dividing H.
    """
    D, H, H_kv = arguments.layer_sizes(d_model, num_heads, num_kv_heads)
    Dh = D // H
    kv_cols = H_kv * Dh
    arguments.check_elements("d_model", D + 2 * kv_cols, 8)
    cols = np.arange(D + 2 * kv_cols)
    projection = np.where(cols < D, 0, np.where(cols < D + kv_cols, 1, 2))
    within = np.where(cols < D, cols, (cols - D) % kv_cols)
    return projection, within // Dh
