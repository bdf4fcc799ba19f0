"""Subspaces that heads read from, compared by principal angles.

Head ``h`` reads its queries from the column space of its ``(D, Dh)`` block ``W_q^h``:
``q = x @ W_q^h`` depends on ``x`` only through its projection onto that ``Dh``-dimensional
subspace of ``R^D``. Two subspaces are compared by their principal angles
``0 <= theta_1 <= ... <= theta_k <= pi/2`` (``k`` the smaller dimension): ``cos theta_j``
are the singular values of ``Q_a^T Q_b`` for orthonormal bases ``Q_a``, ``Q_b``
(Bjorck and Golub, 1973). The subspaces are orthogonal exactly when every angle is 90
degrees, i.e. ``Q_a^T Q_b = 0``.

:func:`frobenius_cosine` is the matrix cosine ``tr(A^T B) / (|A|_F |B|_F)``, kept to show
why it is not a test of orthogonality: it depends on the bases, not only the subspaces.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mha.analysis import _linalg
from mha.core import _tools, packing
from mha.core._checks import arguments
from mha.core._checks.numpy_arrays import as_numpy
from mha.core.params import MHAParams


def orthonormal_basis(a: Any) -> np.ndarray:
    """An orthonormal basis of the column space of ``a``: its left singular vectors.

    One SVD gives both the basis and the check that ``a`` has full column rank (its
    numerical rank, with :func:`mha.analysis.rank.numerical_rank`'s default tolerance).
    Computed with PyTorch on one CPU thread, as in :mod:`mha.analysis.rank`.

    Args:
        a: a matrix with full column rank.

    Shape:
        a ``(D, k)`` with ``k <= D``. Returns ``(D, k)`` with orthonormal columns.

    Returns:
        ``Q``, a NumPy array with ``Q^T Q = I`` spanning the columns of ``a``.

    Raises:
        ValueError: if ``a`` is not 2-D, has more columns than rows, is not finite, or
            does not have full column rank.
        TypeError: if ``a`` is not a floating array or tensor.
    """
    return _basis("a", a)


def _basis(name: str, a: Any) -> np.ndarray:
    """:func:`orthonormal_basis` of an argument called ``name``."""
    a = _linalg.as_matrix(name, a)
    D, k = a.shape
    if k == 0 or k > D:
        raise ValueError(
            f"{name} must have between 1 and D={D} columns (D, k); got shape {a.shape}"
        )
    u, s, _ = _linalg.svd(a / _linalg.scale(a))  # (D, k), (k,): scaled, no overflow
    r = int(np.count_nonzero(s > _linalg.rank_cutoff(s, a.shape, a.dtype, None, 0.0)))
    if r < k:
        raise ValueError(
            f"{name} must have full column rank to span a {k}-dimensional subspace; "
            f"got numerical rank {r}"
        )
    return u


def principal_cosines(a: Any, b: Any) -> np.ndarray:
    """Cosines of the principal angles between the column spaces of ``a`` and ``b``.

    Orthonormal bases of both (:func:`orthonormal_basis`), then the singular values of
    ``Q_a^T Q_b``, clipped to ``[0, 1]`` (rounding can push the cosine of an angle near 0
    slightly above 1).

    Args:
        a: spans the first subspace.
        b: spans the second.

    Shape:
        a ``(D, p)``, b ``(D, q)``. Returns ``(min(p, q),)``, descending.

    Returns:
        The cosines in ``[0, 1]``.

    Raises:
        ValueError: if the matrices do not have the same number of rows, or either fails
            the checks of :func:`orthonormal_basis`.
        TypeError: if either is not a floating array or tensor.
    """
    qa, qb = _bases(a, b)
    with _tools.one_thread():
        s = torch.linalg.svdvals(
            _linalg.to_torch(qa).T @ _linalg.to_torch(qb)
        )  # (p, q) -> (min(p, q),)
    return np.clip(s.numpy(), 0.0, 1.0)


def _bases(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    qa, qb = _basis("a", a), _basis("b", b)
    if qa.shape[0] != qb.shape[0]:
        raise ValueError(
            "a and b must have the same number of rows (the ambient dimension D); "
            f"got {qa.shape[0]} and {qb.shape[0]}"
        )
    dtype = np.result_type(qa, qb)  # float32 only if both are
    return qa.astype(dtype, copy=False), qb.astype(dtype, copy=False)


def principal_angles(a: Any, b: Any, degrees: bool = False) -> np.ndarray:
    """Principal angles between the column spaces of ``a`` and ``b``, smallest first.

    Angles whose cosine exceeds ``1/sqrt(2)`` (below 45 degrees) are computed from their
    sines, the singular values of ``Q_b - Q_a Q_a^T Q_b``, because ``arccos`` loses all
    accuracy near 0: a cosine of ``1 - 1e-16`` gives ``arccos = 1.5e-8``. The others come
    from ``arccos`` of the cosines. Note ``scipy.linalg.subspace_angles`` returns the same
    angles largest first.

    Args:
        a: spans the first subspace.
        b: spans the second.
        degrees: return degrees instead of radians.

    Shape:
        a ``(D, p)``, b ``(D, q)``. Returns ``(min(p, q),)``, ascending.

    Returns:
        The angles in ``[0, pi/2]`` (``[0, 90]`` in degrees).

    Raises:
        ValueError, TypeError: as :func:`principal_cosines`.
        TypeError: if ``degrees`` is not a bool.
    """
    arguments.check_bool("degrees", degrees)
    qa, qb = _bases(a, b)
    if qa.shape[1] < qb.shape[1]:
        qa, qb = qb, qa  # now q <= p: the residual of Q_b has min(p, q) singular values
    ta, tb = _linalg.to_torch(qa), _linalg.to_torch(qb)
    with _tools.one_thread():
        m = ta.T @ tb  # (p, q)
        cos = torch.linalg.svdvals(m).numpy()  # descending
        sin = torch.linalg.svdvals(tb - ta @ m).numpy()[::-1]  # ascending
    cos, sin = np.clip(cos, 0.0, 1.0), np.clip(sin, 0.0, 1.0)
    theta = np.where(cos**2 >= 0.5, np.arcsin(sin), np.arccos(cos))
    return np.degrees(theta) if degrees else theta


def frobenius_cosine(a: Any, b: Any) -> float:
    """The matrix cosine ``tr(A^T B) / (|A|_F |B|_F)`` of two same-shape matrices.

    It is sometimes offered as a "subspace correlation" of two heads. It is the ordinary
    cosine of the flattened matrices: it pairs column ``j`` of ``a`` with column ``j`` of
    ``b``, so it changes when a basis is rotated (``a -> a @ R``) although the subspace
    does not.

    Args:
        a: the first matrix.
        b: the second, of the same shape.

    Shape:
        a and b ``(m, n)``, the same shape.

    Returns:
        The cosine, a ``float`` in ``[-1, 1]``.

    Raises:
        ValueError: if the shapes differ, or a matrix is zero, not 2-D or not finite.
        TypeError: if either is not a floating array or tensor.
    """
    a, b = _linalg.as_matrix("a", a), _linalg.as_matrix("b", b)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape; got {a.shape} and {b.shape}")
    # The cosine does not change with the scale of either: each divided by a power of two
    # near its largest entry, the sums of squares neither overflow nor underflow.
    a, b = a.astype(np.float64) / _linalg.scale(a), b.astype(np.float64) / _linalg.scale(b)
    na, nb = np.sqrt(np.sum(a * a)), np.sqrt(np.sum(b * b))  # no BLAS call: no thread pool
    if na == 0 or nb == 0:
        raise ValueError("a and b must be non-zero; the cosine of a zero matrix is undefined")
    return float(np.sum(a * b) / (na * nb))


def head_blocks(params: MHAParams, which: str = "w_q") -> np.ndarray:
    """Every head's ``(D, Dh)`` block of one projection, stacked.

    Args:
        params: the layer's parameters (NumPy or torch; returned as NumPy); with
            grouped-query parameters, the ``"w_k"`` and ``"w_v"`` block of head ``h`` is
            its group's key/value block.
        which: ``"w_q"``, ``"w_k"`` or ``"w_v"``, whose column spaces the heads read
            from, or ``"w_o"``, returned transposed so that its column space is the
            subspace head ``h`` writes to.

    Shape:
        Returns ``(H, D, Dh)``.

    Returns:
        The blocks, a NumPy array (a copy).

    Raises:
        ValueError: if ``which`` is not one of the four names, or the parameters are not
            finite.
        TypeError: if ``params`` is not ``MHAParams``.
    """
    arguments.instance("params", params, MHAParams, "MHAParams")
    arguments.choice("which", which, ("w_q", "w_k", "w_v", "w_o"))
    p = params.to_numpy()
    for name in ("w_qkv", "w_o"):
        if not np.isfinite(getattr(p, name)).all():
            raise ValueError(f"params.{name} must be finite; got NaN or infinite values")
    blocks = [np.asarray(p.head(h)[which]) for h in range(p.num_heads)]  # H x (D, Dh)
    if which == "w_o":
        blocks = [blk.T for blk in blocks]  # (Dh, D) -> (D, Dh)
    return np.stack(blocks)  # (H, D, Dh)


def pairwise_principal_cosines(blocks: np.ndarray) -> np.ndarray:
    """Principal cosines between every pair of ``(D, Dh)`` blocks.

    Args:
        blocks: H blocks of full column rank, e.g. from :func:`head_blocks`.

    Shape:
        blocks ``(H, D, Dh)``. Returns ``(H, H, Dh)``, each row descending; the diagonal
        holds ones (a subspace with itself).

    Returns:
        ``cos[i, j]``, the principal cosines between blocks ``i`` and ``j``.

    Raises:
        ValueError: if ``blocks`` is not 3-D with at least one block, holds NaN or
            infinity, or a block fails :func:`orthonormal_basis`.
        TypeError: if ``blocks`` is not a floating array or tensor.
    """
    blocks = as_numpy("blocks", blocks)
    if blocks.dtype.kind != "f":
        raise TypeError(f"blocks must be a floating array; got dtype {blocks.dtype}")
    if blocks.size and not np.isfinite(blocks).all():
        raise ValueError("blocks must be finite; got NaN or infinite values")
    if blocks.ndim != 3 or blocks.shape[0] == 0:
        raise ValueError(
            f"blocks must have shape (H, D, Dh); got {blocks.ndim}-D shape {blocks.shape} "
            "(at least one block)"
        )
    bases = _linalg.to_torch(
        np.stack([_basis(f"blocks[{h}]", blk) for h, blk in enumerate(blocks)])
    )  # (H, D, k)
    with _tools.one_thread():
        gram = torch.einsum("idk,jdl->ijkl", bases, bases)  # Q_i^T Q_j, (H, H, k, k)
        s = torch.linalg.svdvals(gram).numpy()  # (H, H, k)
    return np.clip(s, 0.0, 1.0)


def pairwise_frobenius_cosines(w_q_rows: np.ndarray, num_heads: int) -> np.ndarray:
    """The :func:`frobenius_cosine` of every pair of heads' blocks of a ``Linear`` weight.

    A common "orthogonality audit" of attention heads takes a PyTorch ``Linear`` query
    weight ``(D_out, D_in)`` (rows are output features), reshapes it to ``(H, Dh, D)`` and
    compares every pair of ``(Dh, D)`` blocks by their Frobenius cosine; this is that
    table. Block ``h`` is ``W_q^h`` transposed in this package's layout
    (``w_q = linear.weight.T``), so the numbers equal
    ``frobenius_cosine(head(i)["w_q"], head(j)["w_q"])``.

    Args:
        w_q_rows: the ``Linear`` weight, output features as rows.
        num_heads: the number of heads, H.

    Shape:
        w_q_rows ``(D, D)``. Returns ``(H, H)``.

    Returns:
        ``table[i, j]``, the Frobenius cosine of heads ``i`` and ``j`` (1 on the diagonal).

    Raises:
        ValueError: if the weight is not square or not finite, or H does not divide D.
        TypeError: if the weight is not a floating array or ``num_heads`` not an int.
    """
    w = _linalg.as_matrix("w_q_rows", w_q_rows)
    D = w.shape[0]
    if w.shape != (D, D):
        raise ValueError(f"w_q_rows must be square (D, D); got shape {w.shape}")
    D, num_heads, _ = arguments.layer_sizes(D, num_heads)
    blocks = packing.split_head_rows(w, num_heads)  # (D, D) -> (H, Dh, D)
    table = np.empty((num_heads, num_heads))
    for i in range(num_heads):
        for j in range(num_heads):
            table[i, j] = frobenius_cosine(blocks[i], blocks[j])
    return table
