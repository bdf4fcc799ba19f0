"""Numerical rank, and the ranks of a multi-head attention layer's intermediate matrices.

The rank of a matrix computed in floating point is decided by its singular values and a
tolerance: a singular value at or below the tolerance is counted as zero. The default
tolerance is NumPy's (and MATLAB's), ``sigma_max * max(m, n) * eps``. A backward-stable SVD
returns the exact singular values of a matrix within ``c * eps * sigma_max`` of the input
(``c`` a modest function of the size), and by Weyl's inequality every computed singular
value is within that distance of the true one; ``max(m, n)`` stands in for ``c``. A
matrix that was itself computed by a chain of products carries rounding errors of the
same order, so the same tolerance separates "zero up to rounding" from "really there".

For one sequence ``X`` (``N`` rows, ``r = rank(X)``, ``u`` distinct rows), a head's output
in self-attention is ``head_i = A_i (X W_v^i + 1 b_v^i^T) = A_i X W_v^i + 1 b_v^i^T``
(the rows of ``A_i`` sum to one). :func:`rank_bounds` returns the bounds that follow.

Threads: singular values are computed by PyTorch's LAPACK on one CPU thread, not by
``numpy.linalg``, whose OpenBLAS thread pool (which no NumPy API limits locally) made many
small SVDs over 20 times slower in CPU time when the machine's other core was busy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mha.analysis import _linalg
from mha.backends import np_backend
from mha.core import _tools, packing
from mha.core._checks import arguments, numpy_arrays
from mha.core.params import MHAParams, repeat_kv_heads
from mha.detectors import circuits


def default_rtol(shape: tuple[int, int], dtype: Any = np.float64) -> float:
    """The default relative rank tolerance ``max(m, n) * eps`` (NumPy's ``matrix_rank``).

    Args:
        shape: ``(m, n)``, the shape of the matrix.
        dtype: its floating dtype; ``eps`` is that dtype's machine epsilon
            (about 2.2e-16 for float64, 1.2e-7 for float32).

    Returns:
        ``max(m, n) * eps`` as a float.

    Raises:
        ValueError: if a size is negative.
        TypeError: if ``shape`` is not a pair of ints (Python or NumPy, not bools) or
            ``dtype`` is not a floating NumPy or torch dtype.
    """
    sizes = arguments.items("shape", shape)
    if len(sizes) != 2:
        raise ValueError(f"shape must be a pair (m, n); got {shape!r}")
    m, n = (arguments.size(f"shape[{i}]", v, 0, None) for i, v in enumerate(sizes))
    return max(m, n) * _eps("dtype", dtype)


def _eps(name: str, dtype: Any) -> float:
    """Machine epsilon of a floating NumPy or torch dtype."""
    if dtype is None:  # np.dtype(None) would be float64
        raise TypeError(f"{name} must be a floating dtype; got None")
    if type(dtype).__module__ == "torch":
        if not getattr(dtype, "is_floating_point", False):
            raise TypeError(f"{name} must be a floating dtype; got {dtype}")
        return float(torch.finfo(dtype).eps)
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"{name} must be a floating dtype; got {arguments.describe(dtype)}"
        ) from None
    if not np.issubdtype(np_dtype, np.floating):
        raise TypeError(f"{name} must be a floating dtype; got dtype {np_dtype}")
    return float(np.finfo(np_dtype).eps)


def rank_tolerance(a: Any, rtol: float | None = None, atol: float = 0.0) -> float:
    """The absolute tolerance below which a singular value of ``a`` counts as zero.

    ``tol = max(atol, rtol * sigma_max)``, with ``rtol`` defaulting to
    :func:`default_rtol` (so the default is NumPy's ``sigma_max * max(m, n) * eps``).

    Args:
        a: the matrix.
        rtol: relative tolerance; ``None`` for the default.
        atol: absolute tolerance.

    Shape:
        a ``(m, n)``.

    Returns:
        The tolerance, a non-negative ``float``.

    Raises:
        ValueError: if ``a`` is not 2-D or not finite, a tolerance is negative or not
            finite, or the tolerance exceeds float64's range.
        TypeError: if ``a`` is not a floating array or tensor, or a tolerance is not a real
            number.
    """
    a = _linalg.as_matrix("a", a)
    rtol, atol = _linalg.check_tolerances(rtol, atol)
    c = _linalg.scale(a)
    s = _linalg.svdvals(a.astype(np.float64) / c)  # scaled, in float64: see numerical_rank
    tol = _linalg.rank_cutoff(s, a.shape, a.dtype, rtol, atol / c) * c
    if not np.isfinite(tol):
        raise ValueError(f"the tolerance rtol * sigma_max of a exceeds float64's range; got {tol}")
    return float(tol)


def singular_values(a: Any) -> np.ndarray:
    """The singular values of ``a``, in descending order.

    Computed with ``torch.linalg.svdvals`` on one CPU thread (see the module docstring);
    float32 matrices in float32, other floating dtypes in float64.

    Args:
        a: the matrix (a NumPy array or a torch tensor, which is copied to NumPy).

    Shape:
        a ``(m, n)``. Returns ``(min(m, n),)``.

    Returns:
        The singular values, a NumPy array (float32 for a float32 matrix).

    Raises:
        ValueError: if ``a`` is not 2-D or not finite, or its largest singular value
            exceeds its dtype's range (entries near the largest float).
        TypeError: if ``a`` is not a floating array or tensor.
    """
    a = _linalg.as_matrix("a", a)
    c = _linalg.scale(a)  # a power of two: exact, and no overflow inside the SVD
    with np.errstate(over="ignore"):
        s = _linalg.svdvals(a / c) * np.asarray(
            c, dtype=np.float32 if a.dtype == np.float32 else np.float64
        )
    if not np.isfinite(s).all():
        raise ValueError(
            f"a's largest singular value exceeds the range of {s.dtype} (entries up to "
            f"{float(np.abs(a).max()):.3g}); scale a down first"
        )
    return s


def numerical_rank(a: Any, rtol: float | None = None, atol: float = 0.0) -> int:
    """The number of singular values of ``a`` strictly above the rank tolerance.

    With the defaults this equals ``numpy.linalg.matrix_rank(a)``. An empty matrix and
    the zero matrix have rank 0. The singular values are those of ``a``'s numbers, computed
    in float64 whatever its dtype (the default ``rtol`` still comes from ``a``'s dtype), so
    that a tolerance below float32's rounding counts what the numbers hold.

    Args:
        a: the matrix (a NumPy array or a torch tensor, which is copied to NumPy).
        rtol: relative tolerance (times ``sigma_max``); ``None`` for ``max(m, n) * eps``.
        atol: absolute tolerance; the larger of the two applies.

    Shape:
        a ``(m, n)``.

    Returns:
        The numerical rank, an ``int`` in ``[0, min(m, n)]``.

    Raises:
        ValueError: if ``a`` is not 2-D or not finite, or a tolerance is negative or not
            finite.
        TypeError: if ``a`` is not a floating array or tensor, or a tolerance is not a real
            number.
    """
    a = _linalg.as_matrix("a", a)
    rtol, atol = _linalg.check_tolerances(rtol, atol)
    c = _linalg.scale(a)  # the rank of a / c, against atol / c: no overflow, no underflow
    # In float64 whatever a's dtype (its entries convert exactly): a float32 SVD's own rounding
    # (about eps32 sigma_max) would count as rank under a tolerance below it.
    s = _linalg.svdvals(a.astype(np.float64) / c)  # descending
    with np.errstate(over="ignore"):
        tol = _linalg.rank_cutoff(s, a.shape, a.dtype, rtol, atol / c)
    return int(np.count_nonzero(s > tol))


def attention_parts(x: np.ndarray, params: MHAParams) -> dict[str, np.ndarray]:
    """The intermediate matrices of self-attention on ``x``, for rank analysis.

    Returns the attention weights, each head's output ``A_i (X W_v^i + 1 b_v^i^T)``, their
    concatenation, and the layer output ``Concat W^O + 1 b_o^T`` (equal to
    ``np_backend.multi_head_attention(x, x, x, params)``).

    Args:
        x: one batch of sequences.
        params: NumPy parameters of the dtype of ``x``; with grouped-query parameters,
            head ``i`` attends to the values of its group's key/value head.

    Shape:
        x ``(B, L, D)``. Returns ``weights (B, H, L, L)``, ``heads (B, H, L, Dh)``,
        ``concat (B, L, D)`` and ``output (B, L, D)``.

    Returns:
        ``{"weights", "heads", "concat", "output"}`` -> NumPy array.

    Raises:
        ValueError: if ``x`` is not ``(B, L, D)`` with the layer's D or not finite, or as
            :func:`mha.backends.np_backend.multi_head_attention`.
        TypeError: if ``x`` is not a float32/float64 NumPy array of the dtype of
            ``params``, or as :func:`mha.backends.np_backend.multi_head_attention`.
    """
    arguments.instance("params", params, MHAParams, "MHAParams")
    arguments.instance("x", x, np.ndarray, "a numpy.ndarray")
    a = numpy_arrays.float_array("x", x, ndim=3, layout="(B, L, D)")  # finite, named x
    if x.dtype != params.dtype:
        raise TypeError(f"x must have the dtype of params ({params.dtype}); got {x.dtype}")
    if a.shape[-1] != params.d_model:
        raise ValueError(f"x must have shape (B, L, D) with D={params.d_model}; got {x.shape}")
    output, weights = np_backend.multi_head_attention(x, x, x, params)  # checks the rest
    H = params.num_heads
    per_head = repeat_kv_heads(params)  # each query head with its own value block
    val = x @ per_head.w_v  # (B, L, D)
    if per_head.b_v is not None:
        val = val + per_head.b_v
    heads = weights @ np_backend.split_heads(val, H)  # (B, H, L, L) @ (B, H, L, Dh)
    concat = np_backend.merge_heads(heads)  # (B, H, L, Dh) -> (B, L, D)
    return {"weights": weights, "heads": heads, "concat": concat, "output": output}


def count_distinct_rows(x: np.ndarray) -> int:
    """The number of distinct rows of a matrix (exact comparison).

    Args:
        x: the matrix (a NumPy array or a torch tensor).

    Shape:
        x ``(N, D)``.

    Returns:
        The number of distinct rows, an ``int``.

    Raises:
        ValueError: if ``x`` is not 2-D or not finite.
        TypeError: if ``x`` is not a floating array or tensor.
    """
    x = _linalg.as_matrix("x", x)
    return int(np.unique(x, axis=0).shape[0])


def rank_bounds(x: np.ndarray, params: MHAParams) -> dict[str, Any]:
    """Upper bounds on the ranks of self-attention's matrices for one sequence ``x``.

    With ``N`` tokens, ``u`` distinct rows, ``r = rank(X)``, ``H`` heads of width ``Dh``:

    - head ``i``: ``min(u, Dh, r + beta_i)``, ``beta_i = 1`` if head ``i``'s value bias
      is non-zero, else 0;
    - concatenation: ``min(u, D, H * min(Dh, r) + beta)``, ``beta = 1`` if any value bias
      is non-zero (all biases together add one rank-one term ``1 b_v^T``, not ``H``);
    - output: ``min(u, D, min(H * min(Dh, r), rank(W^O)) + gamma)``, ``gamma = 1`` if
      ``b_v^T W^O + b_o^T`` is non-zero.

    Ranks are numerical ranks with the default tolerance. Grouped-query parameters are
    bounded as the multi-head layer that computes the same
    (:func:`mha.core.params.repeat_kv_heads`).

    Args:
        x: one sequence.
        params: NumPy or torch parameters (read in float64).

    Shape:
        x ``(N, D)``.

    Returns:
        ``{"head": (H,) int array, "concat": int, "output": int}``.

    Raises:
        ValueError: if ``x`` is not 2-D, not finite, or its width is not ``params.d_model``,
            or the parameters are not finite.
        TypeError: if ``x`` is not floating or ``params`` is not ``MHAParams``.
    """
    params = _finite_params(params)
    x = _linalg.as_matrix("x", x)
    if x.shape[1] != params.d_model:
        raise ValueError(
            f"x width must equal d_model={params.d_model}; got x.shape={tuple(x.shape)}"
        )
    H, Dh, D = params.num_heads, params.d_head, params.d_model
    u, r = count_distinct_rows(x), numerical_rank(x)
    head_b_v = [params.head(h)["b_v"] for h in range(H)]  # (Dh,) each, or None
    beta_h = np.array([b is not None and bool(np.any(np.asarray(b) != 0)) for b in head_b_v])
    b_v = np.zeros(D) if params.b_v is None else np.asarray(params.b_v)
    b_o = np.zeros(D) if params.b_o is None else np.asarray(params.b_o)
    beta = int(np.any(b_v != 0))
    gamma = int(np.any(b_v @ params.w_o + b_o != 0))
    bias_free_concat = H * min(Dh, r)
    return {
        "head": np.minimum(np.minimum(u, Dh), r + beta_h),
        "concat": int(min(u, D, bias_free_concat + beta)),
        "output": int(min(u, D, min(bias_free_concat, numerical_rank(params.w_o)) + gamma)),
    }


def _finite_params(params: Any) -> MHAParams:
    """``params`` as finite float64 NumPy multi-head parameters (grouped-query ones repeated)."""
    arguments.instance("params", params, MHAParams, "MHAParams")
    p = repeat_kv_heads(params.to_numpy(np.float64))
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        if getattr(p, name) is not None and not np.isfinite(getattr(p, name)).all():
            raise ValueError(f"params.{name} must be finite; got NaN or infinite values")
    return p


def circuit_singular_values(params: MHAParams) -> dict[str, np.ndarray]:
    """Singular values of every head's QK and OV circuit (Elhage et al., 2021).

    Head ``h``'s QK circuit is the ``(D, D)`` matrix ``W_q^h W_k^h^T`` (token ``a`` scores
    token ``b`` by ``x_a W_q^h W_k^h^T x_b^T / sqrt(Dh)``); its OV circuit is
    ``W_v^h W_o^h`` (what the head adds to the output per unit of attention to a token).
    Both factor through ``Dh`` dimensions, so at most ``Dh`` singular values are non-zero;
    the rest come out at the rounding level. All heads at once, in float64, with PyTorch on
    one CPU thread.

    Args:
        params: the layer's parameters (NumPy or torch); with grouped-query parameters,
            head ``h``'s circuits use its group's key and value blocks.

    Shape:
        Returns ``{"QK": (H, D), "OV": (H, D)}``, each row in descending order.

    Returns:
        ``{"QK": ..., "OV": ...}``, float64 NumPy arrays.

    Raises:
        ValueError: if the parameters are not finite.
        TypeError: if ``params`` is not ``MHAParams``.
    """
    p = _finite_params(params)
    H = p.num_heads

    w_q, w_k, w_v = _linalg.to_torch(packing.split_head_blocks(p.w_qkv, H))  # (H, D, Dh) each
    w_o = _linalg.to_torch(packing.split_head_rows(p.w_o, H))  # (D, D) -> (H, Dh, D)
    with _tools.one_thread():
        qk = w_q @ w_k.transpose(1, 2)  # (H, D, Dh) @ (H, Dh, D) -> (H, D, D)
        ov = w_v @ w_o  # (H, D, Dh) @ (H, Dh, D) -> (H, D, D)
        return {"QK": torch.linalg.svdvals(qk).numpy(), "OV": torch.linalg.svdvals(ov).numpy()}


def query_bias_shares(model: Any, texts: list[str]) -> dict[str, Any]:
    """How much of what a pretrained model's softmax sees comes from its query biases.

    With biases, head ``h``'s scores are the QK circuit plus three bias terms
    (:func:`mha.detectors.circuits.score_terms`); the softmax removes the two that are the same for
    every key, and the query bias against each key, ``b^Q_h (x_j W^K_h)^T``, remains. For
    every text on its own, every layer (on that layer's input) and every head, this returns
    the ratio of Frobenius norms of the row-centred query-bias term and of the row-centred
    scores, and checks the decomposition against the model's own weights: the softmax of
    the QK circuit plus the query-bias term should reproduce them, the QK circuit alone
    should not.

    Args:
        model: an :class:`mha.models.minilm.MiniLM` (anything with ``run``, ``num_layers``,
            ``num_heads`` and ``attention_params``).
        texts: the texts, each run on its own.

    Returns:
        A dict with ``share``, the ``(layers, H)`` mean of the ratio over the texts, and
        ``error_with_bias`` and ``error_without_bias``, the largest absolute difference
        from the model's weights of the softmax with and without the query-bias term.

    Raises:
        ValueError: if ``texts`` is empty, or as the model's ``run``.
        TypeError: if ``texts`` is not a list of strings (a single string included) or
            ``model`` lacks ``run``, ``num_layers``, ``num_heads`` or ``attention_params``.
    """
    texts = arguments.items("texts", texts)
    if not texts:
        raise ValueError("texts must hold at least one text; got none")
    for i, text in enumerate(texts):
        arguments.text(f"texts[{i}]", text)
    missing = [
        n for n in ("run", "num_layers", "num_heads", "attention_params") if not hasattr(model, n)
    ]
    if missing:
        raise TypeError(
            f"model must be a MiniLM (with {', '.join(missing)}); got {arguments.describe(model)}"
        )

    def centred(z: np.ndarray) -> np.ndarray:
        return z - z.mean(axis=-1, keepdims=True)  # Z C: what the softmax sees

    shares, with_bias, without = [], 0.0, 0.0
    for text in texts:
        out, _ = model.run(text)
        share = np.zeros((model.num_layers, model.num_heads))
        for layer in range(model.num_layers):
            x = out.hidden_states[layer].double().numpy()  # (1, L, D): the layer's input
            terms = circuits.score_terms(x, model.attention_params(layer))  # (1, H, L, L)
            total = sum(terms.values(), np.zeros_like(terms["query_bias"]))  # (1, H, L, L)
            norm = np.linalg.norm(centred(total), axis=(-2, -1))  # (1, H)
            share[layer] = (np.linalg.norm(centred(terms["query_bias"]), axis=(-2, -1)) / norm)[0]
            weights = out.attentions[layer][0].double().numpy()  # (H, L, L): the model's own
            fitted = np_backend.softmax(terms["bilinear"] + terms["query_bias"])[0]
            circuit = np_backend.softmax(terms["bilinear"])[0]
            with_bias = max(with_bias, float(np.abs(fitted - weights).max()))
            without = max(without, float(np.abs(circuit - weights).max()))
        shares.append(share)
    return {
        "share": np.mean(shares, axis=0),
        "error_with_bias": with_bias,
        "error_without_bias": without,
    }
