"""The low-rank bottleneck of one attention head (Bhojanapalli et al., 2020).

A head's scores on one sequence ``X`` (``N`` tokens, bias-free projections) are
``Z = X W_q W_k^T X^T / sqrt(Dh)``, a matrix of rank at most ``Dh``. Softmax ignores a
constant added to a row, so ``softmax(Z) = P`` exactly when the row-centred scores agree:
``Z C = log(P) C`` with ``C = I - 1 1^T / N``. Hence, for ``X`` of rank ``N``:

- ``P`` is reachable iff ``rank(log(P) C) <= Dh`` (:func:`required_head_width`), and
  ``rank(log(P) C) <= N - 1`` always;
- the smallest centred-logit error ``|(log softmax(Z) - log P) C|_F`` over all
  projections is the Eckart-Young tail of ``log(P) C`` (:func:`centred_logit_floor`).

Targets are row-stochastic (rows are attention distributions, as everywhere in this
package); the paper writes tokens as columns and calls the same matrices column
stochastic.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from mha.analysis import _linalg, _targets
from mha.analysis._head_fit import fit_heads
from mha.analysis.rank import numerical_rank
from mha.core._checks import arguments, numpy_arrays
from mha.core._checks.numpy_arrays import as_numpy
from mha.core.params import MHAParams
from mha.numerics.tolerance import TARGET_ROW_SUM_ATOL


def centering_matrix(n: int) -> np.ndarray:
    """``C = I - 1 1^T / n``, the orthogonal projector that subtracts row means (``M C``).

    Args:
        n: the number of columns (tokens) N.

    Shape:
        Returns ``(n, n)``.

    Returns:
        ``C``, symmetric and idempotent, with ``C 1 = 0``.

    Raises:
        ValueError: if ``n`` is not positive or ``(n, n)`` would pass what an array can hold.
        TypeError: if ``n`` is not an int (a Python or NumPy integer, not a bool).
    """
    n = arguments.size("n", n)
    arguments.check_elements("n", n * n, 8)
    return np.eye(n) - np.full((n, n), 1.0 / n)


def check_attention_target(target: Any, atol: float = TARGET_ROW_SUM_ATOL) -> np.ndarray:
    """Check that ``target`` is a square, positive, row-stochastic matrix; return it.

    Args:
        target: the attention pattern, rows are distributions over keys.
        atol: tolerance on each row sum.

    Shape:
        target ``(N, N)``.

    Returns:
        ``target`` as a NumPy array (its rows unchanged).

    Raises:
        ValueError: if it is not square, has an entry ``<= 0`` (its logarithm must be
            finite), or a row does not sum to one within ``atol``; or ``atol`` is negative
            or not finite.
        TypeError: if it is not a floating array, or ``atol`` not a real number.
    """
    atol = arguments.number("atol", atol, low=0.0)
    return _targets.as_target("target", target, atol)


def centred_log(target: Any) -> np.ndarray:
    """The row-centred log target ``log(P) C``: the only part of the scores softmax sees.

    Args:
        target: positive row-stochastic pattern ``P``.

    Shape:
        target ``(N, N)``. Returns ``(N, N)`` with rows summing to zero.

    Returns:
        ``log(P) C``.

    Raises:
        ValueError, TypeError: as :func:`check_attention_target`.
    """
    return _targets.centred_log("target", target)


def required_head_width(target: Any, centre: bool = True) -> int:
    """The smallest head width ``Dh`` at which a bias-free head can produce ``target``.

    With ``centre=True`` this is ``rank(log(P) C)``, exact for an input of rank ``N``;
    with ``centre=False`` it is ``rank(log P)``, what a construction that factors
    ``log P`` itself (with no row shift) needs. Numerical ranks, default tolerance.

    Args:
        target: positive row-stochastic pattern ``P``.
        centre: count the rank of the row-centred ``log(P) C`` rather than of ``log P``.

    Shape:
        target ``(N, N)``.

    Returns:
        The numerical rank, an ``int`` in ``[0, N]`` (at most ``N - 1`` when ``centre``).

    Raises:
        ValueError, TypeError: as :func:`check_attention_target`.
        TypeError: if ``centre`` is not a bool.
    """
    arguments.check_bool("centre", centre)
    m = centred_log(target) if centre else np.log(check_attention_target(target))
    return numerical_rank(m)


def attention_from_projections(x: Any, w_q: Any, w_k: Any) -> np.ndarray:
    """``softmax(X W_q W_k^T X^T / sqrt(Dh))``: one bias-free head's attention weights.

    Args:
        x: one sequence, a token per row.
        w_q: query projection.
        w_k: key projection.

    Shape:
        x ``(N, D)``, w_q and w_k ``(D, Dh)``. Returns ``(N, N)``.

    Returns:
        The attention weights, rows summing to one.

    Raises:
        ValueError: if a matrix is not 2-D or not finite, the shapes do not chain,
            ``Dh = 0``, or the scores overflow float64.
        TypeError: if a matrix is not floating.
    """
    x, w_q, w_k = (
        _linalg.as_matrix("x", x),
        _linalg.as_matrix("w_q", w_q),
        _linalg.as_matrix("w_k", w_k),
    )
    if w_q.shape != w_k.shape or w_q.shape[0] != x.shape[1]:
        raise ValueError(
            "w_q and w_k must both have shape (D, Dh) with D = x.shape[1] = "
            f"{x.shape[1]}; got w_q {w_q.shape}, w_k {w_k.shape}"
        )
    if w_q.shape[1] == 0:
        raise ValueError(f"w_q and w_k must have at least one column (Dh >= 1); got {w_q.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        z = (x @ w_q) @ (x @ w_k).T / np.sqrt(w_q.shape[1])  # (N, Dh) @ (Dh, N) -> (N, N)
    if not np.isfinite(z).all():
        top = max(float(np.abs(m).max(initial=0)) for m in (x, w_q, w_k))
        raise ValueError(
            "the scores x w_q w_k^T x^T / sqrt(Dh) must be finite; got an overflow of "
            f"float64 (x, w_q and w_k up to {top:.3g})"
        )
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def bhojanapalli_projections(
    x: Any, target: Any, d_head: int, centre: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Projections ``W_q, W_k`` with ``softmax(X W_q W_k^T X^T / sqrt(Dh)) = P`` exactly.

    Realises the first part of Theorem 1 of Bhojanapalli et al. (2020), which is stated
    for ``Dh >= N``, with one dimension fewer when ``centre``: pick scores ``M`` with
    ``softmax(M) = P`` (``M = log(P) C`` when ``centre``, else ``M = log P``), factor
    ``M = U V^T`` with ``r = rank(M)`` columns by an SVD, and pull the factors back
    through ``X`` with its pseudo-inverse ``X^+`` (``X X^+ = I_N`` as ``X`` has rank N):
    ``W_q = sqrt(Dh) X^+ U E``, ``W_k = X^+ V E`` with ``E = [I_r, 0]`` of shape
    ``(r, Dh)``. Then ``X W_q W_k^T X^T = sqrt(Dh) U V^T = sqrt(Dh) M``.

    Args:
        x: one sequence whose ``N`` rows are linearly independent (so ``N <= D``).
        target: positive row-stochastic attention pattern.
        d_head: head width Dh; must be at least ``required_head_width(target, centre)``
            (at most ``N - 1`` with centring, ``N`` without).
        centre: factor the row-centred ``log(P) C`` (rank ``<= N - 1``) rather than
            ``log P`` (rank ``<= N``).

    Shape:
        x ``(N, D)``, target ``(N, N)``. Returns ``w_q``, ``w_k`` of shape ``(D, Dh)``.

    Returns:
        ``(w_q, w_k)``, NumPy float64 arrays.

    Raises:
        ValueError: if ``x`` does not have rank N, the target fails
            :func:`check_attention_target` or has another size, ``d_head`` is too small, or
            the projections would pass what an array can hold.
        TypeError: if ``d_head`` is not an int (a Python or NumPy integer, not a bool),
            ``centre`` is not a bool, or an array is not floating.
    """
    arguments.check_bool("centre", centre)
    x = _linalg.as_matrix("x", x)
    p = check_attention_target(target)
    d_head = arguments.size("d_head", d_head, 0)
    N = x.shape[0]
    if p.shape[0] != N:
        raise ValueError(f"target must be ({N}, {N}) for x with N={N} rows; got {p.shape}")
    if numerical_rank(x) != N:
        raise ValueError(
            f"x must have rank N={N} (linearly independent rows, so N <= D={x.shape[1]}); "
            f"got numerical rank {numerical_rank(x)}"
        )
    m = centred_log(p) if centre else np.log(p)
    r = numerical_rank(m)
    if d_head < r:
        kind = "rank(log(P) C)" if centre else "rank(log P)"
        raise ValueError(f"d_head must be at least {kind} = {r} for this target; got {d_head}")
    arguments.check_elements("d_head", x.shape[1] * d_head, 8)
    u, s, vt = _linalg.svd(m)
    U, V = u[:, :r] * s[:r], vt[:r].T  # M = U V^T, (N, r) each
    x_pinv = _linalg.pinv(x)  # (D, N), x @ x_pinv = I_N
    E = np.eye(r, d_head)  # (r, Dh)
    return np.sqrt(d_head) * x_pinv @ U @ E, x_pinv @ V @ E  # (D, Dh) each


def centred_logit_error(weights: Any, target: Any) -> float:
    """``|(log W - log P) C|_F``: the distance between two patterns' centred logits.

    Softmax is a bijection between row-centred score matrices and positive row-stochastic
    matrices, so this is a distance between the scores that produce ``weights`` and
    ``target`` (zero exactly when they are equal).

    Args:
        weights: positive row-stochastic pattern ``W``.
        target: positive row-stochastic pattern ``P`` of the same shape.

    Shape:
        weights and target ``(N, N)``.

    Returns:
        The Frobenius norm, a non-negative ``float``.

    Raises:
        ValueError, TypeError: as :func:`check_attention_target`, for either matrix.
    """
    w, p = _targets.centred_log("weights", weights), centred_log(target)
    if w.shape != p.shape:
        raise ValueError(f"weights and target must have the same shape; got {w.shape}, {p.shape}")
    return float(np.linalg.norm(w - p))


def centred_logit_floor(target: Any, d_head: int) -> float:
    """The least ``centred_logit_error`` any bias-free head of width ``d_head`` can reach.

    ``sqrt(sum_{k > Dh} sigma_k(log(P) C)^2)`` (Eckart-Young): a lower bound for every
    input ``X``, attained when ``X`` has rank N (by the truncated SVD of ``log(P) C``).

    Args:
        target: positive row-stochastic pattern ``P``.
        d_head: head width Dh (0 allowed: the whole centred log target is the error).

    Shape:
        target ``(N, N)``.

    Returns:
        The floor, a non-negative ``float`` (0 when ``d_head >= rank(log(P) C)``).

    Raises:
        ValueError: if ``d_head`` is negative, or as :func:`check_attention_target`.
        TypeError: if ``d_head`` is not an int (a Python or NumPy integer, not a bool).
    """
    d_head = arguments.size("d_head", d_head, 0, None)
    s = _linalg.svdvals(centred_log(target))
    return float(np.sqrt(np.sum(s[d_head:] ** 2)))


def self_focus_target(n: int, alpha: float) -> np.ndarray:
    """``P_ij`` proportional to ``exp(alpha [i = j])``: every token attends to itself.

    ``log(P) C = alpha C`` has ``N - 1`` singular values equal to ``alpha``, so no head
    narrower than ``N - 1`` produces it, on any input, and the best centred-logit error
    at width ``Dh`` is ``alpha * sqrt(N - 1 - Dh)``.

    Args:
        n: number of tokens N.
        alpha: the extra score of the diagonal.

    Shape:
        Returns ``(n, n)``.

    Returns:
        The positive row-stochastic pattern ``P``.

    Raises:
        ValueError: if ``n`` is not positive, ``(n, n)`` would pass what an array can hold,
            or ``alpha`` is not finite.
        TypeError: if ``n`` is not an int or ``alpha`` not a real number.
    """
    n = arguments.size("n", n)
    arguments.check_elements("n", n * n, 8)
    alpha = arguments.number("alpha", alpha)
    e = np.exp(alpha * np.eye(n) - max(alpha, 0.0))  # shifted so that no entry overflows
    return e / e.sum(axis=1, keepdims=True)


def fit_attention(
    x: Any,
    target: Any,
    d_head: int,
    *,
    steps: int = 300,
    lr: float = 0.05,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Fit one bias-free head to a target pattern by gradient descent (Adam, float64).

    Minimises the squared centred-logit error ``|(Z - log P) C|_F^2`` of the scores
    ``Z = X W_q W_k^T X^T / sqrt(Dh)``, from ``N(0, 1/D)`` initial weights, with the
    learning rate decayed to zero on a cosine schedule.

    Args:
        x: one sequence.
        target: positive row-stochastic pattern.
        d_head: head width Dh.
        steps: Adam steps.
        lr: initial learning rate.
        seed: seed of the initial weights.

    Shape:
        x ``(N, D)``, target ``(N, N)``. Returns ``w_q``, ``w_k`` ``(D, Dh)`` and the
        final :func:`centred_logit_error`.

    Returns:
        ``(w_q, w_k, error)``: the fitted projections and their final centred-logit error.

    Raises:
        ValueError: if ``d_head`` or ``steps`` is not positive, ``lr`` is not positive and
            finite, ``seed`` is negative, shapes disagree, or as
            :func:`check_attention_target`.
        TypeError: if ``d_head``, ``steps`` or ``seed`` is not an int (a Python or NumPy
            integer, not a bool), or ``lr`` not a real number.
    """
    x = _linalg.as_matrix("x", x)
    (w,) = fit_heads(x, [target], [d_head], steps, lr, seed)
    w_q, w_k = w
    return w_q, w_k, centred_logit_error(attention_from_projections(x, w_q, w_k), target)


def fit_attention_sweep(
    x: Any,
    targets: Any,
    d_heads: Any,
    *,
    steps: int = 300,
    lr: float = 0.05,
    seed: int = 0,
) -> np.ndarray:
    """:func:`fit_attention` for every target and every head width, in one batched run.

    The fits are independent (the summed loss decouples and Adam acts elementwise); they
    run as one batch of zero-padded heads, which is much faster than one fit at a time.

    Args:
        x: one sequence.
        targets: K positive row-stochastic patterns.
        d_heads: the head widths to fit, each a positive int.
        steps: Adam steps.
        lr: initial learning rate.
        seed: seed of the initial weights.

    Shape:
        x ``(N, D)``, targets ``(K, N, N)``. Returns the final errors ``(K, len(d_heads))``.

    Returns:
        The final :func:`centred_logit_error` of every (target, head width) fit.

    Raises:
        ValueError, TypeError: as :func:`fit_attention`.
        ValueError: if ``targets`` or ``d_heads`` is empty.
        TypeError: if ``d_heads`` is not a list of ints.
    """
    x = _linalg.as_matrix("x", x)
    if hasattr(targets, "shape"):
        targets = list(as_numpy("targets", targets))
    targets = [
        _targets.as_target(f"targets[{k}]", t)
        for k, t in enumerate(arguments.items("targets", targets))
    ]
    d_heads = arguments.size_list("d_heads", d_heads, nonempty=False)
    for name, values in (("targets", targets), ("d_heads", d_heads)):
        if not values:
            raise ValueError(f"{name} must hold at least one entry; got none")
    pairs = [(t, d) for t in targets for d in d_heads]
    weights = fit_heads(x, [t for t, _ in pairs], [d for _, d in pairs], steps, lr, seed)
    errors = [
        centred_logit_error(attention_from_projections(x, w_q, w_k), t)
        for (t, _), (w_q, w_k) in zip(pairs, weights, strict=True)
    ]
    return np.array(errors).reshape(len(targets), len(d_heads))


def best_layer_error(targets: Any, num_heads: int, d_head: int) -> float:
    """The least total squared centred-logit error of ``num_heads`` heads on ``targets``.

    Each target is served by one head; a head serving a group ``G`` of targets produces
    one pattern, whose best centred scores are the rank-``Dh`` truncation of the group's
    mean centred log target. The error of a group is its scatter
    ``sum_{t in G} |L_t - mean_G|^2`` plus ``|G|`` times the Eckart-Young tail of the mean
    squared; this enumerates every partition of the targets into at most ``num_heads``
    groups (exact; meant for a handful of targets). Assumes an input of rank N.

    Args:
        targets: K positive row-stochastic patterns on the same N tokens.
        num_heads: the number of heads, H.
        d_head: Dh.

    Shape:
        targets ``(K, N, N)``.

    Returns:
        The least total squared error, a non-negative ``float``.

    Raises:
        ValueError: if ``targets`` is not 3-D with 1 to 8 patterns, or a size is not
            positive, or a pattern fails :func:`check_attention_target`.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool), or
            ``targets`` is not a floating array.
    """
    targets = numpy_arrays.float_array("targets", targets)
    if targets.ndim != 3 or not 1 <= len(targets) <= 8:
        raise ValueError(
            f"targets must have shape (K, N, N) with 1 <= K <= 8; got {np.shape(targets)}"
        )
    num_heads = arguments.size("num_heads", num_heads, high=None)
    d_head = arguments.size("d_head", d_head, high=None)
    logs = np.stack(
        [_targets.centred_log(f"targets[{k}]", t) for k, t in enumerate(targets)]
    )  # (K, N, N)

    def group_error(group: tuple[int, ...]) -> float:
        mean = logs[list(group)].mean(axis=0)
        scatter = float(np.sum((logs[list(group)] - mean) ** 2))
        s = _linalg.svdvals(mean)
        return scatter + len(group) * float(np.sum(s[d_head:] ** 2))

    def best(items: tuple[int, ...], groups_left: int) -> float:
        if not items:
            return 0.0
        if groups_left == 0:
            return np.inf
        first, rest = items[0], items[1:]
        result = np.inf
        for k in range(len(rest) + 1):  # the group holding `first`, then the others
            for others in combinations(rest, k):
                remaining = tuple(i for i in rest if i not in others)
                err = group_error((first, *others)) + best(remaining, groups_left - 1)
                result = min(result, err)
        return result

    return float(best(tuple(range(len(logs))), num_heads))


def total_variation(weights: Any, target: Any) -> np.ndarray:
    """Row by row, ``TV_i = (1/2) sum_j |A_ij - P_ij|``, the total variation distance.

    It bounds what the difference does to the head's output: for any values ``v_j``,
    ``|sum_j (A_ij - P_ij) v_j| <= 2 TV_i max_j |v_j|``. It is at most 1, and it is small
    when the weights are close, whatever happens to weights that are tiny in both.

    Args:
        weights: the head's weights ``A``, rows that are distributions.
        target: the target ``P``, the same shape.

    Returns:
        ``TV_i`` for every row, in ``[0, 1]``.

    Shape:
        weights and target ``(N, S)``. Returns ``(N,)``.

    Raises:
        ValueError: if the shapes differ or a row is not a distribution.
        TypeError: if a matrix is not floating.
    """
    w, p = _targets.check_pair(weights, target)
    return 0.5 * np.abs(w - p).sum(axis=1)


def kl_divergence(weights: Any, target: Any) -> np.ndarray:
    """Row by row, ``KL(P_i || A_i) = sum_j P_ij log(P_ij / A_ij)``, in nats.

    The extra cross-entropy paid for predicting the target's rows with the head's:
    0 exactly when they are equal, infinite where the head gives 0 weight to a key the
    target uses. Keys the target gives 0 add nothing, so a one-hot target row is allowed:
    its KL is ``-log A_it``, the loss of the head on the target key. Pinsker's inequality,
    ``KL >= 2 TV^2``, makes a small KL imply a small :func:`total_variation`.

    Args:
        weights: the head's weights ``A``, rows that are distributions.
        target: the target ``P``, the same shape.

    Returns:
        ``KL(P_i || A_i)`` for every row, ``inf`` where the head ignores a target key.

    Shape:
        weights and target ``(N, S)``. Returns ``(N,)``.

    Raises:
        ValueError: if the shapes differ or a row is not a distribution.
        TypeError: if a matrix is not floating.
    """
    w, p = _targets.check_pair(weights, target)
    with np.errstate(divide="ignore"):
        log_w = np.log(w)
    return _kl(p, log_w)


def _kl(p: np.ndarray, log_a: np.ndarray) -> np.ndarray:
    """``sum_j p_j (log p_j - log a_j)`` per row, with ``0 log 0 = 0``."""
    used = p > 0
    terms = np.where(used, p * (np.log(np.where(used, p, 1.0)) - np.where(used, log_a, 0.0)), 0.0)
    return terms.sum(axis=1)


def offset_head(n: int, offset: int, gap: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A head of width 2 in which query ``i`` attends to key ``i + offset``: a rotation on a circle.

    Token ``j`` sits at angle ``j theta`` on a half circle, ``x_j = (cos j theta,
    sin j theta)`` with ``theta = pi / N``; ``W^K = I`` and ``W^Q`` rotates by
    ``offset * theta`` and scales by ``c``, so ``q_i`` points at key ``i + offset`` and the
    scores are ``c cos((i + offset - j) theta)``. Every other key scores at least
    ``c (1 - cos theta) = gap`` below the target, so the weight on the target is at least
    ``1 / (1 + (N - 1) e^-gap)``, at every ``N``, with a width of 2; sharper patterns and
    longer sequences need a larger ``c`` (larger weights), not a wider head. A query whose
    key ``i + offset`` is outside ``[0, N)`` attends mostly to the nearest end.

    Args:
        n: sequence length N.
        offset: ``-1`` for the previous token, ``0`` for itself, ``+1`` for the next.
        gap: the score margin of the target over every other key.

    Returns:
        ``(x, w_q, w_k)``: the input and the head's two projections.

    Shape:
        Returns x ``(N, 2)``, w_q and w_k ``(2, 2)``, for :func:`attention_from_projections`.

    Raises:
        ValueError: if ``n`` is not an int >= 2, or ``gap`` is not positive and finite.
        TypeError: if ``n`` or ``offset`` is not an int (a Python or NumPy integer, not a
            bool), or ``gap`` not a real number.
    """
    n = arguments.size("n", n, 2)
    offset = arguments.integer("offset", offset)
    arguments.check_positive_number("gap", gap)
    gap = float(gap)
    theta = np.pi / n
    angle = np.arange(n) * theta
    x = np.stack([np.cos(angle), np.sin(angle)], axis=1)  # (N, 2)
    phi = offset * theta
    rotation = np.array([[np.cos(phi), np.sin(phi)], [-np.sin(phi), np.cos(phi)]])
    scale = gap / (1.0 - np.cos(theta))
    # scores = x W^Q (x W^K)^T / sqrt(2): put sqrt(2) into W^Q
    return x, np.sqrt(2.0) * scale * rotation, np.eye(2)


def truncated_centred_log(target: Any, d_head: int) -> np.ndarray:
    """The scores of the head of width ``d_head`` that is best in centred logits.

    The rank-``Dh`` truncated SVD of ``log(P) C``: by the Eckart-Young theorem no head of
    that width has a smaller :func:`centred_logit_error` (the error is
    :func:`centred_logit_floor`), and on an input of rank N some head has exactly these
    scores (the construction of :func:`bhojanapalli_projections`).

    Args:
        target: the target ``P``, a positive row-stochastic matrix.
        d_head: the head width ``Dh``.

    Returns:
        The best width-``Dh`` head's scores.

    Shape:
        target ``(N, N)``. Returns ``(N, N)`` scores, rows summing to zero.

    Raises:
        ValueError: if ``d_head`` is negative, or as :func:`check_attention_target`.
        TypeError: if ``d_head`` is not an int (a Python or NumPy integer, not a bool).
    """
    d_head = arguments.size("d_head", d_head, 0, None)
    u, s, vt = np.linalg.svd(centred_log(target))
    return (u[:, :d_head] * s[:d_head]) @ vt[:d_head]  # (N, Dh) @ (Dh, N)


def attention_errors(scores: Any, target: Any) -> dict[str, Any]:
    """How far the attention ``softmax(scores)`` is from ``target``, by three measures.

    Computed from the scores, so that weights too small for float64 (``e^-800``) keep
    their finite logarithms:

    - ``"centred_logit"``: ``|(log A - log P) C|_F`` (:func:`centred_logit_error`), the
      distance between the scores softmax sees; it grows with ``|log A_ij - log P_ij|``
      even where both weights are tiny, and is infinite when the target has a zero;
    - ``"total_variation"``: per row, :func:`total_variation`, at most 1;
    - ``"kl"``: per row, :func:`kl_divergence`, ``KL(P_i || A_i)`` in nats.

    Args:
        scores: the head's scores ``Z``; its weights are ``softmax(Z)`` row by row.
        target: the target pattern ``P``, rows that are distributions.

    Returns:
        ``{"centred_logit": float, "total_variation": (N,), "kl": (N,)}``.

    Shape:
        scores and target ``(N, N)``. Returns a float and two ``(N,)`` arrays.

    Raises:
        ValueError: if the shapes differ, the scores are not finite, or a row of the
            target is not a distribution.
        TypeError: if a matrix is not floating.
    """
    z, p = _linalg.as_matrix("scores", scores), _linalg.as_matrix("target", target)
    if z.shape != p.shape:
        raise ValueError(f"scores and target must have the same shape; got {z.shape}, {p.shape}")
    _targets.check_distributions("target", p, TARGET_ROW_SUM_ATOL)
    shifted = z - z.max(axis=1, keepdims=True)
    log_a = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))  # log softmax
    if (p > 0).all():
        diff = log_a - np.log(p)
        centred = float(np.linalg.norm(diff - diff.mean(axis=1, keepdims=True)))
    else:
        centred = np.inf  # log 0: no finite scores produce a zero weight
    return {
        "centred_logit": centred,
        "total_variation": 0.5 * np.abs(np.exp(log_a) - p).sum(axis=1),
        "kl": _kl(p, log_a),
    }


POSITIONAL_PATTERNS = ("previous", "next", "self", "first")


def positional_patterns(n: int, mix: float = 0.0) -> np.ndarray:
    """Four sharp positional attention patterns on ``n`` tokens, optionally mixed.

    In order (:data:`POSITIONAL_PATTERNS`): query ``i`` attends to token ``i - 1`` (token 0
    to itself), to token ``i + 1`` (the last token to itself), to itself, and to token 0.
    With ``mix > 0`` every row is ``(1 - mix)`` times its one-hot row plus ``mix / n`` on
    every key, a positive pattern whose centred logarithm exists.

    Args:
        n: the number of tokens N, at least 2.
        mix: the weight of uniform attention mixed in, in ``[0, 1)``.

    Returns:
        The patterns, rows summing to one.

    Shape:
        Returns ``(4, N, N)``.

    Raises:
        ValueError: if ``n`` is below 2, ``(4, n, n)`` would pass what an array can hold,
            or ``mix`` is outside ``[0, 1)``.
        TypeError: if ``n`` is not an int (a Python or NumPy integer, not a bool) or
            ``mix`` not a real number.
    """
    n = arguments.size("n", n, 2)
    arguments.check_elements("n", 4 * n * n, 8)
    mix = arguments.number("mix", mix, low=0.0, high=1.0, open_high=True)
    eye = np.eye(n)
    first_row, last_row = eye[0][:, None] * eye[0], eye[-1][:, None] * eye[-1]  # (N, N) each
    sharp = np.stack(
        [
            np.eye(n, k=-1) + first_row,  # previous; token 0 attends to itself
            np.eye(n, k=1) + last_row,  # next; the last token attends to itself
            eye,  # self
            np.outer(np.ones(n), eye[0]),  # first
        ]
    )  # (4, N, N)
    return (1.0 - mix) * sharp + mix / n


def positional_layer(
    n: int, d_model: int, num_heads: int, gap: float
) -> tuple[np.ndarray, MHAParams]:
    """One bias-free layer whose first four heads form :func:`positional_patterns`' patterns.

    The input has ``d_model`` features per token: the two circle coordinates of
    :func:`offset_head` (features 0 and 1), a constant 1 (feature 2), an indicator of token
    0 (feature 3), and zeros. Heads 1 to 3 are :func:`offset_head`'s rotations with offsets
    ``-1``, ``+1`` and ``0`` in the first two columns of their blocks; head 4 scores
    ``gap * [j = 0]`` (its query reads the constant, its key the indicator: rank 1). Every
    other query and key column is zero, so heads 5 to H attend uniformly. ``W^V`` and
    ``W^O`` are the identity. Every head of a wide enough layer thus puts at least
    ``1 / (1 + (N - 1) e^-gap)`` of each query's weight on its target.

    Args:
        n: tokens N, at least 2.
        d_model: D, at least 4.
        num_heads: H, at least 4, dividing D with ``D / H >= 2``.
        gap: the score margin of each head's target over every other key.

    Returns:
        ``(x, params)``: the input and the layer (float64).

    Shape:
        Returns x ``(N, D)``.

    Raises:
        ValueError: if a size breaks these rules, the layer would pass what an array can
            hold, or ``gap`` is not positive and finite.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool) or
            ``gap`` not a real number.
    """
    n = arguments.size("n", n, 2)
    d_model = arguments.size("d_model", d_model, 4)
    num_heads = arguments.size("num_heads", num_heads, 4)
    arguments.check_positive_number("gap", gap)
    arguments.check_elements("d_model", (n + 3 * d_model) * d_model, 8)
    if d_model % num_heads or d_model // num_heads < 2:
        raise ValueError(
            f"num_heads must divide d_model with d_model / num_heads >= 2; got d_model={d_model}, "
            f"num_heads={num_heads}"
        )
    Dh = d_model // num_heads
    x = np.zeros((n, d_model))
    w_q, w_k = np.zeros((d_model, d_model)), np.zeros((d_model, d_model))
    for h, offset in enumerate((-1, 1, 0)):  # heads 1, 2, 3 in code order 0, 1, 2
        circle, wq, wk = offset_head(n, offset, gap)  # (N, 2), (2, 2), (2, 2)
        x[:, :2] = circle
        cols = slice(h * Dh, h * Dh + 2)
        w_q[:2, cols] = wq * np.sqrt(Dh / 2)  # offset_head folds sqrt(2) into W^Q; here sqrt(Dh)
        w_k[:2, cols] = wk
    x[:, 2], x[0, 3] = 1.0, 1.0  # a constant and an indicator of token 0
    w_q[2, 3 * Dh] = gap * np.sqrt(Dh)  # head 4: query = the constant ...
    w_k[3, 3 * Dh] = 1.0  # ... against key = "is token 0"
    eye = np.eye(d_model)
    return x, MHAParams.from_qkv(w_q, w_k, eye, eye, num_heads=num_heads)


def sharp_target_bounds(targets: Any, num_heads: int, d_head: int) -> dict[str, float]:
    """Lower bounds on how close any bias-free layer can come to one-hot target patterns.

    Each of the K targets is served by one head, and the error of a layer is that of its
    worst-served target, as a mean over rows. Two arguments, each used where it applies:

    - fewer heads than targets: one head serves two targets ``P, P'``, and by the triangle
      inequality (row by row) one of them is at least ``TV(P, P') / 2`` away; with one
      head, take the farthest pair, else the closest;
    - ``d_head == 1``: the scores are ``z_ij = a_i b_j``, so every row's largest weight
      falls on the key of the largest or of the smallest ``b_j``; a row whose target key is
      neither puts at most 1/2 on it, a TV of at least 1/2 and a KL of at least ``log 2``.

    The KL bound of the first argument is Pinsker's inequality, ``KL >= 2 TV^2``.

    Args:
        targets: K one-hot patterns on the same N tokens.
        num_heads: the number of heads, H.
        d_head: Dh.

    Shape:
        targets ``(K, N, N)``.

    Returns:
        ``{"total_variation": ..., "kl": ...}``: bounds on the worst target's mean TV and
        mean KL (nats); 0 where neither argument applies.

    Raises:
        ValueError: if ``targets`` is not ``(K, N, N)`` with one-hot rows or a size is not
            positive.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool), or
            ``targets`` is not a numeric array.
    """
    t = numpy_arrays.float_array("targets", targets)
    if t.ndim != 3 or t.shape[1] != t.shape[2]:
        raise ValueError(f"targets must have shape (K, N, N); got {t.shape}")
    if not (np.isin(t, (0.0, 1.0)).all() and (t.sum(axis=-1) == 1).all()):
        raise ValueError("targets must have one-hot rows (one key with weight 1 per query)")
    num_heads = arguments.size("num_heads", num_heads, high=None)
    d_head = arguments.size("d_head", d_head, high=None)
    K, N = t.shape[:2]
    tv, kl = 0.0, 0.0
    if num_heads < K and K > 1:
        pairs = [total_variation(a, b).mean() for i, a in enumerate(t) for b in t[i + 1 :]]
        shared = (max(pairs) if num_heads == 1 else min(pairs)) / 2
        tv, kl = max(tv, shared), max(kl, 2 * shared**2)  # Pinsker, then Jensen over rows
    if d_head == 1:
        favourites = [np.sort(np.bincount(p.argmax(axis=1), minlength=N))[-2:].sum() for p in t]
        rows_off = (N - min(favourites)) / N  # rows off their target's two favourite keys
        tv, kl = max(tv, rows_off / 2), max(kl, rows_off * float(np.log(2)))
    return {"total_variation": float(tv), "kl": float(kl)}
