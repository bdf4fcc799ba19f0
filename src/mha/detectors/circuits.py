"""Weight-based circuit scores: what a head does, read from its weights and values.

Where :mod:`mha.detectors.patterns` scores where a head attends, these scores weigh in what
it reads and writes: :func:`value_norms` and :func:`value_weighted_attention` (attention
weighted by the size of what each key contributes), :func:`score_terms` (the four terms of a
query-key score: token-token, token-position, position-token, position-position),
and :func:`copying_score` (how much a head's OV circuit copies a token to the same token's
logit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.backends import np_backend
from mha.core.params import MHAParams
from mha.detectors._scoring import check_weights, float_array, params64


def _layer_input(x: Any, params: Any, layout: str) -> tuple[np.ndarray, MHAParams]:
    """``x`` and ``params`` in float64, ``x`` checked to be a layer's input ``(B, n, D)``."""
    x = float_array("x", x)
    p = params64(params)
    if x.ndim != 3 or x.shape[-1] != p.d_model:
        raise ValueError(f"x must have shape {layout} with D={p.d_model}; got shape {x.shape}")
    return x, p


def value_norms(x: Any, params: MHAParams) -> np.ndarray:
    """``|(x_j W^V_h + b^V_h) W^O_h|``: what head ``h`` writes per unit of weight on key ``j``.

    A head's output at query ``i`` is ``sum_j A[i, j] (x_j W^V_h + b^V_h) W^O_h`` (plus the
    shared ``b^O``), so key ``j`` contributes a vector of norm ``A[i, j]`` times this
    number. Kobayashi et al. (2020) call attention weighted by it norm-based attention.

    Args:
        x: the keys' and values' input, NumPy array or torch tensor.
        params: the layer's parameters (either backend; computed in float64); with
            grouped-query parameters, query head ``h`` reads the values of its group's
            key/value head through its own rows of ``W^O``.

    Returns:
        The norm of what each head writes per unit weight on each key.

    Shape:
        x ``(B, S, D)``. Returns ``(B, H, S)`` float64.

    Raises:
        ValueError: if ``x`` is not ``(B, S, D)`` with D = params.d_model, or ``x`` or the
            parameters hold NaN or infinity.
        TypeError: if ``x`` is not numeric or ``params`` is not ``MHAParams``.
    """
    x, p = _layer_input(x, params, "(B, S, D)")
    H, D, Dh = p.num_heads, p.d_model, p.d_head
    v = x @ p.w_v + (0.0 if p.b_v is None else p.b_v)  # (B, S, D)
    v = v.reshape(*x.shape[:2], H, Dh).transpose(0, 2, 1, 3)  # (B, S, D) -> (B, H, S, Dh)
    out = np.einsum("bhsd,hde->bhse", v, p.w_o.reshape(H, Dh, D))  # (B, H, S, D)
    return np.linalg.norm(out, axis=-1)  # (B, H, S)


def value_weighted_attention(weights: Any, norms: Any) -> np.ndarray:
    """Each key's share of what a head writes: ``A[i, j] n_j / sum_k A[i, k] n_k``.

    ``n_j`` is :func:`value_norms`. The rows are distributions again, so every detector
    applies: the first-token score of the result is the share of the norm-weighted
    output that comes from the first token, to set beside its share of the weight. Rows
    whose allowed keys all have norm 0 stay 0.

    Args:
        weights: the head's attention weights.
        norms: :func:`value_norms` of the same layer and input.

    Returns:
        The norm-weighted weights, rows that are distributions (or 0).

    Shape:
        weights ``(B, H, L, S)``; norms ``(B, H, S)``. Returns ``(B, H, L, S)``.

    Raises:
        ValueError: if the shapes do not match, a norm is negative, NaN or infinite, or the
            rows of ``weights`` are not distributions.
        TypeError: if ``weights`` is not floating or ``norms`` not numeric.
    """
    w = check_weights(weights)
    n = float_array("norms", norms)
    if n.shape != w.shape[:-2] + w.shape[-1:]:
        raise ValueError(
            f"norms must have shape {w.shape[:-2] + w.shape[-1:]} for weights {w.shape}; "
            f"got {n.shape}"
        )
    if (n < 0).any():
        raise ValueError("norms must be non-negative")
    mass = w * n[..., None, :]  # (B, H, L, S)
    total = mass.sum(axis=-1, keepdims=True)  # (B, H, L, 1)
    return np.divide(mass, total, out=np.zeros_like(mass), where=total > 0)


def score_terms(x: Any, params: MHAParams) -> dict[str, np.ndarray]:
    """The four terms of a biased head's scores ``(x_i W^Q + b^Q)(x_j W^K + b^K)^T / sqrt(Dh)``.

    - ``"bilinear"``: ``x_i W^Q_h (W^K_h)^T x_j^T``, the QK circuit of Elhage et al.;
    - ``"query_bias"``: ``b^Q_h (x_j W^K_h)^T``, the query bias against each key: it
      depends on the key ``j``, so the softmax does not remove it;
    - ``"key_bias"``: ``x_i W^Q_h (b^K_h)^T``, the same for every key of query ``i``: the
      softmax removes it;
    - ``"constant"``: ``b^Q_h (b^K_h)^T``, the same everywhere: removed too.

    Each term is divided by ``sqrt(Dh)``; they sum to the head's scores. Without biases
    the last three are 0.

    Args:
        x: one input for queries and keys (self-attention), NumPy array or torch tensor.
        params: the layer's parameters (computed in float64); with grouped-query
            parameters, query head ``h`` meets the keys of its group's key/value head.

    Returns:
        ``{"bilinear", "query_bias", "key_bias", "constant"}``, each term of the
        scores (divided by ``sqrt(Dh)``); they sum to the scores.

    Shape:
        x ``(B, L, D)``. Each term ``(B, H, L, L)``.

    Raises:
        ValueError, TypeError: as :func:`value_norms`, for ``x`` of shape ``(B, L, D)``.
    """
    x, p = _layer_input(x, params, "(B, L, D)")
    H, D, Dh = p.num_heads, p.d_model, p.d_head

    q = np_backend.split_heads(x @ p.w_q, H)  # (B, L, D) -> (B, H, L, Dh)
    k = np_backend.split_heads(x @ p.w_k, H)  # (B, L, D) -> (B, H, L, Dh)
    zero = np.zeros(D)
    b_q = (zero if p.b_q is None else p.b_q).reshape(H, 1, Dh)  # (D,) -> (H, 1, Dh)
    b_k = (zero if p.b_k is None else p.b_k).reshape(H, 1, Dh)  # (D,) -> (H, 1, Dh)
    root = np.sqrt(Dh)
    shape = q.shape[:-1] + k.shape[-2:-1]  # (B, H, L, L)
    return {
        "bilinear": q @ np.swapaxes(k, -1, -2) / root,
        "query_bias": np.broadcast_to(b_q @ np.swapaxes(k, -1, -2) / root, shape),
        "key_bias": np.broadcast_to(q @ np.swapaxes(b_k, -1, -2) / root, shape),
        "constant": np.broadcast_to(b_q @ np.swapaxes(b_k, -1, -2) / root, shape),
    }


def copying_score(w_e: Any, w_v: Any, w_o: Any, w_u: Any) -> np.ndarray:
    """``sum(lambda) / sum(|lambda|)`` over the eigenvalues of ``W_E W^V_h W^O_h W_U``.

    The full OV circuit maps a token attended to onto the logits the head adds (row
    vectors: token ``t`` adds ``e_t W_E W^V_h W^O_h W_U``). A head that copies raises the
    logit of the token it attends to, so the circuit has large positive eigenvalues: the
    score is 1 for a circuit with only non-negative eigenvalues, -1 for only non-positive
    ones, near 0 for a random one (Elhage et al. 2021; Olsson et al. 2022 use it, with
    prefix matching, to identify induction heads). The ``V x V`` circuit has the same
    non-zero eigenvalues as the ``Dh x Dh`` matrix ``W^O_h W_U W_E W^V_h``, which is what
    is computed.

    Args:
        w_e: token embedding.
        w_v: one head's value block, or a stack of them.
        w_o: the head's rows of the output projection, or a stack.
        w_u: unembedding.

    Returns:
        The score of each head, in ``[-1, 1]``.

    Shape:
        w_e ``(V, D)``; w_v ``(..., D, Dh)``; w_o ``(..., Dh, D)``; w_u ``(D, V)``.
        Returns ``(...)``.

    Raises:
        ValueError: if the shapes do not chain, a matrix holds NaN or infinity, or every
            eigenvalue is 0.
        TypeError: if a matrix is not numeric.
    """
    e, v, o, u = (
        float_array(name, t) for name, t in (("w_e", w_e), ("w_v", w_v), ("w_o", w_o), ("w_u", w_u))
    )
    D = e.shape[-1]
    if (
        e.ndim != 2
        or u.shape != (D, e.shape[0])
        or v.shape[-2] != D
        or o.shape[-1] != D
        or o.shape[-2] != v.shape[-1]
        or v.shape[:-2] != o.shape[:-2]
    ):
        raise ValueError(
            "w_e (V, D), w_v (..., D, Dh), w_o (..., Dh, D) and w_u (D, V) must chain; got "
            f"{e.shape}, {v.shape}, {o.shape}, {u.shape}"
        )
    small = o @ (u @ e) @ v  # (..., Dh, D) (D, D) (..., D, Dh) -> (..., Dh, Dh)
    lam = np.linalg.eigvals(small)  # (..., Dh)
    total = np.abs(lam).sum(axis=-1)
    if (total == 0).any():
        raise ValueError("the OV circuit must have a non-zero eigenvalue; got a zero circuit")
    return lam.sum(axis=-1).real / total
