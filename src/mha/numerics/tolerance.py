"""How far apart two floating-point routes to the same result may be, on any machine.

Two computations of the same quantity that take different routes (a column block of a big
matrix product against the product with the block, a fused form against a per-head loop,
NumPy against PyTorch, one BLAS kernel against another) are equal in exact arithmetic and
differ in floating point by rounding. How much depends on the BLAS kernel, the SIMD width and
the thread count, so bit-equality observed on one machine says nothing about another. This
module turns the dtype and the sizes into a bound that holds for every summation order.

The derivation. Let ``u`` be the unit roundoff of the dtype (half its machine epsilon:
``2**-53`` for float64, ``2**-24`` for float32). A sum of ``n`` products computed in floating
point, in *any* order and with or without fused multiply-adds, satisfies

    ``|fl(x . y) - x . y| <= gamma_n * sum_k |x_k y_k|``,  ``gamma_n = n u / (1 - n u)``

(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 3.5 and
Lemma 3.1). Blocked and parallel BLAS kernels only reorder the sum, so the bound covers
them all. Two routes each within the bound differ by at most twice it:
:func:`matmul_tolerance` returns ``2 gamma_n (|A| |B|)``, entry by entry, for two
computations of ``A @ B``. For a longer chain (projections, scores, softmax, weighted sum)
:func:`rounding_tolerance` adds, to first order in ``u``, one such term per stage in which
the error can grow, with ``scale`` the size of the summands (``sum_k |x_k y_k|``, or a bound
on it). These are worst-case bounds: typical differences are about ``sqrt(n)`` times
smaller, so a bound that is met with room to spare is the expected outcome, not a weak test.

At large logits the bound is set by the scores: :func:`softmax_tolerance` gives the
agreement of attention weights as a function of the logit scale (about ``1e-4`` in float32 at
logits of ``1e4``, where it is about ``1e-6`` at logits of order 1).

Every bound the package asserts with is here, each under one name: the rounding of one
product or chain (:func:`gamma`, :func:`rounding_tolerance`, :func:`matmul_tolerance`), the
softmax at a logit scale (:func:`softmax_tolerance`), a whole layer against the float64
reference (:func:`attention_tolerance`, which runs :mod:`mha.backends.np_backend`, so this
module sits above the backends), two routes to a latent attention layer
(:func:`latent_tolerance`), two blockings of an online softmax
(:func:`online_softmax_tolerance`) and two routes to tiled attention's output and
log-sum-exp (:func:`tiled_attention_tolerance`), and how far rows of weights handed to the
detectors and the bottleneck's distances may sum from 1 (:data:`ATTENTION_ROW_SUM_ATOL`,
:data:`DISTRIBUTION_ROW_SUM_ATOL`) and how far a bottleneck target's rows may
(:data:`TARGET_ROW_SUM_ATOL`), and the gradients by hand of :mod:`mha.numerics.backward`
against another route (:func:`gradient_tolerance`, :func:`attention_gradient_tolerance`).
These two scale the magnitude passes of that module,
:func:`mha.numerics.backward.gradient_magnitudes` and
:func:`mha.numerics.backward.attention_gradient_magnitudes`: its backward run on ``|.|`` of
every factor, which bounds the sum each gradient entry is rounded in.

Exact equality is right only where the arithmetic is exact: copies, views, reshapes,
permutations, integer and boolean results, and one call repeated on the same inputs in one
process. Everything else is compared with :func:`assert_close` or :func:`is_close`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mha.backends import latent, np_backend
from mha.core._checks import arguments, arrays, numpy_arrays
from mha.core._checks.arguments import check_positive
from mha.core._checks.numpy_arrays import as_numpy
from mha.core.latent_params import MLAParams
from mha.core.params import MHAParams, repeat_kv_heads
from mha.core.rotary import rotate
from mha.numerics import backward
from mha.numerics._float64 import as_float64, check_float_inputs, largest_excess

ATTENTION_ROW_SUM_ATOL = 1e-4
"""How far a row of attention weights given to a detector (:mod:`mha.detectors`) may sum
from 1 (float32 softmax rounding is far below it)."""

DISTRIBUTION_ROW_SUM_ATOL = 1e-5
"""How far a row may sum from 1 in :func:`mha.analysis.bottleneck.total_variation` and
:func:`mha.analysis.bottleneck.kl_divergence` (float32 softmax rows of a few hundred keys are
well inside it)."""

TARGET_ROW_SUM_ATOL = 1e-10
"""How far a row of a target pattern may sum from 1 in :mod:`mha.analysis.bottleneck`
(:func:`~mha.analysis.bottleneck.check_attention_target`,
:func:`~mha.analysis.bottleneck.attention_errors`): targets are float64 distributions built
by hand, whose row sums are within a few float64 roundings of 1."""


def unit_roundoff(dtype: Any) -> float:
    """The unit roundoff ``u`` (half the machine epsilon) of a floating dtype.

    Args:
        dtype: a NumPy or PyTorch floating dtype (``np.float32``, ``torch.bfloat16``, ...),
            or an array or tensor, whose dtype is used.

    Returns:
        ``u``: ``2**-53`` for float64, ``2**-24`` for float32, ``2**-11`` for float16 and
        ``2**-8`` for bfloat16.

    Raises:
        TypeError: if ``dtype`` is ``None`` or not a floating dtype (or an array of one).
    """
    if dtype is None:  # np.dtype(None) would read it as float64
        raise TypeError("dtype must be a floating dtype; got None")
    if not isinstance(dtype, type) and hasattr(dtype, "dtype"):
        dtype = dtype.dtype  # an array or a tensor
    if hasattr(dtype, "is_floating_point"):  # a torch.dtype
        import torch

        if not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating dtype; got dtype {dtype}")
        return float(torch.finfo(dtype).eps) / 2
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"dtype must be a floating dtype; got {dtype!r}") from error
    if not np.issubdtype(np_dtype, np.floating):
        raise TypeError(f"dtype must be a floating dtype; got dtype {np_dtype}")
    return float(np.finfo(np_dtype).eps) / 2


def gamma(dtype: Any, terms: int) -> float:
    """``gamma_n = n u / (1 - n u)``: the relative error bound of a sum of ``n`` products.

    Args:
        dtype: the floating dtype of the arithmetic.
        terms: ``n``, the number of products summed (the inner dimension of a matmul).

    Returns:
        ``gamma_n``.

    Raises:
        TypeError: if ``terms`` is not an int, or ``dtype`` is ``None`` or not floating.
        ValueError: if ``terms < 1``, or ``n u >= 1`` (no bound exists: the sum is too long
            for the precision).
    """
    check_positive("terms", terms)
    u = unit_roundoff(dtype)
    if terms >= 1 / u:  # compared before multiplying: an int beyond float's range overflows
        nu = terms * u if terms < 2**1000 else math.inf
        raise ValueError(
            f"terms * unit roundoff must be below 1 for a rounding bound; got terms={terms}, "
            f"u = {u:.3g} (n u = {nu:.3g})"
        )
    nu = terms * u
    return nu / (1 - nu)


def rounding_tolerance(dtype: Any, *, terms: int, scale: float = 1.0, stages: int = 1) -> float:
    """Largest difference between two routes to a result built from sums of products.

    Args:
        dtype: the floating dtype of the arithmetic (NumPy or PyTorch, or an array).
        terms: the length of the longest sum (a matmul's inner dimension, a softmax row).
        scale: the size of the summands, ``sum_k |x_k y_k|`` or a bound on it; for results
            that are probabilities, 1.
        stages: how many chained stages can each contribute their own rounding
            (e.g. 4 for projection, scores, softmax and weighted sum).

    Returns:
        ``2 * stages * gamma_n * scale``.

    Raises:
        TypeError: if ``terms`` or ``stages`` is not an int, ``scale`` is not a number, or
            ``dtype`` is ``None`` or not floating.
        ValueError: if ``terms`` or ``stages`` is below 1, ``scale`` is negative or not
            finite, or the sum is too long for the precision.
    """
    check_positive("stages", stages)
    if isinstance(scale, bool) or not isinstance(scale, int | float | np.floating | np.integer):
        raise TypeError(f"scale must be a number; got {type(scale).__name__} {scale!r}")
    if not arguments.is_finite_real(scale) or scale < 0:
        raise ValueError(f"scale must be a finite number >= 0; got scale={scale!r}")
    return 2.0 * stages * gamma(dtype, terms) * float(scale)


def softmax_tolerance(dtype: Any, *, logit_scale: float, d_head: int, kv_len: int) -> float:
    """How far two routes to attention weights may differ, as a function of the logit scale.

    A score ``s = q . k / sqrt(Dh)`` is a sum of ``Dh`` products and one scaling, so each
    route errs by at most ``(gamma_Dh + u) c``, with ``c`` the logit scale: a bound on
    ``sum_d |q_d k_d| / sqrt(Dh)`` over every query and key (at least the largest ``|s|``).
    A weight ``w_j = exp(s_j - m) / sum_k exp(s_k - m)`` then moves relatively by at most
    its own score's error plus the largest in its row, plus ``gamma_(S+2)`` for the
    exponential, the sum and the division. For two routes,

        ``|w_1 - w_2| <= w rho <= rho``,  ``rho = 2 (2 (gamma_Dh + u) c + gamma_(S+2))``.

    The bound grows linearly with ``c``: the rounding of the scores themselves, not of the
    softmax, limits agreement at large logits. In float32 (``u = 2**-24``) two routes agree
    to about ``1e-6`` when the logits are of order 1, but at logits of about ``1e4`` a score
    alone is rounded to a grid of spacing ``2**-10``, and the weights of two routes can
    differ by about ``1e-4``, each route about as far from float64: float32 conditioning,
    not an error of either. Compare at large logits with this bound, not with a fixed
    ``1e-5``. An output ``o = sum_j w_j v_j`` moves by at most ``(rho + 2 gamma_S) max |v|``.

    Args:
        dtype: the floating dtype of the arithmetic.
        logit_scale: ``c >= max sum_d |q_d k_d| / sqrt(Dh)``, a non-negative number.
        d_head: Dh, the length of each score's sum.
        kv_len: S, the length of each softmax row.

    Returns:
        ``rho``, a bound on the absolute difference of any weight between two routes.

    Raises:
        TypeError: if ``d_head`` or ``kv_len`` is not an int, ``logit_scale`` is not a
            number, or ``dtype`` is ``None`` or not floating.
        ValueError: if ``d_head`` or ``kv_len`` is below 1, ``logit_scale`` is negative or
            not finite, or a sum is too long for the precision.
    """
    check_positive("d_head", d_head)
    check_positive("kv_len", kv_len)
    if isinstance(logit_scale, bool) or not isinstance(logit_scale, int | float | np.number):
        raise TypeError(f"logit_scale must be a number; got {type(logit_scale).__name__}")
    if not arguments.is_finite_real(logit_scale) or logit_scale < 0:
        raise ValueError(f"logit_scale must be a finite number >= 0; got {logit_scale!r}")
    u = unit_roundoff(dtype)
    score = (gamma(dtype, d_head) + u) * float(logit_scale)
    return 2.0 * (2.0 * score + gamma(dtype, kv_len + 2))


def matmul_tolerance(a: Any, b: Any) -> np.ndarray:
    """Entry-by-entry bound on the difference between two computations of ``a @ b``.

    Any two summation orders (BLAS kernels, blockings, thread counts, a column block taken
    before or after the product) give results within ``2 gamma_n (|a| @ |b|)`` of each
    other, ``n`` being the inner dimension.

    Args:
        a: left factor, NumPy array or torch tensor.
        b: right factor, of the same dtype.

    Shape:
        a ``(..., m, n)``, b ``(..., n, p)``; returns ``(..., m, p)`` (as ``a @ b``).

    Returns:
        The bound as a float64 NumPy array.

    Raises:
        ValueError: if ``a`` or ``b`` has fewer than 2 dimensions, holds NaN or infinity,
            or their inner dimensions differ or leading dimensions do not broadcast.
        TypeError: if ``a`` or ``b`` is not a NumPy array or torch tensor of a floating
            dtype, or is a ``meta`` or sparse tensor.
    """
    check_float_inputs({"a": a, "b": b})  # the bound is in a's dtype
    a_np, b_np = as_float64("a", a), as_float64("b", b)
    for name, x in (("a", a_np), ("b", b_np)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., rows, cols); got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError(f"{name} must be finite; got NaN or infinite values")
    if a_np.shape[-1] != b_np.shape[-2]:
        raise ValueError(
            f"a and b must have matching inner dimensions; got a {a_np.shape}, b {b_np.shape}"
        )
    try:
        np.broadcast_shapes(a_np.shape[:-2], b_np.shape[:-2])
    except ValueError:
        raise ValueError(
            "a and b must have broadcastable leading (batch) dimensions; got a "
            f"{a_np.shape}, b {b_np.shape}"
        ) from None
    g = gamma(a, a_np.shape[-1])
    return 2.0 * g * (np.abs(a_np) @ np.abs(b_np))


def max_abs_diff(actual: Any, expected: Any) -> float:
    """``max |actual - expected|`` over all entries, computed in float64.

    Args:
        actual: NumPy array or torch tensor.
        expected: the same shape.

    Returns:
        The largest absolute difference, a ``float`` (0 for empty arrays; NaN when an
        entry of either is NaN).

    Raises:
        ValueError: if the shapes differ, or an argument is a ragged sequence.
        TypeError: if an argument is ``None`` or not real numbers (complex, object), or a
            ``meta`` or sparse tensor.
    """
    a, e = as_float64("actual", actual), as_float64("expected", expected)
    if a.shape != e.shape:
        raise ValueError(f"actual and expected must have one shape; got {a.shape} and {e.shape}")
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - e)))


def is_close(actual: Any, expected: Any, tolerance: Any) -> bool:
    """Whether every entry of ``actual`` is within ``tolerance`` of ``expected``.

    Args:
        actual: NumPy array or torch tensor.
        expected: the same shape.
        tolerance: a number or an array broadcastable to the shape (e.g. from
            :func:`matmul_tolerance` or :func:`rounding_tolerance`). NaN and infinite
            entries must agree exactly.

    Returns:
        ``True`` when every ``|actual - expected| <= tolerance`` entry by entry.

    Raises:
        ValueError: if the shapes differ, the tolerance does not broadcast to them or is
            negative or not finite, or an argument is a ragged sequence.
        TypeError: if an argument is ``None`` or not real numbers (complex, object), or a
            ``meta`` or sparse tensor.
    """
    return largest_excess(actual, expected, tolerance)[0] <= 0


def assert_close(actual: Any, expected: Any, tolerance: Any, *, name: str = "actual") -> float:
    """Raise ``AssertionError`` unless :func:`is_close`; return the largest difference.

    The message gives the largest excess: the difference and the tolerance at that entry.

    Args:
        actual: NumPy array or torch tensor.
        expected: the same shape.
        tolerance: a number or an array broadcastable to the shape, as in :func:`is_close`.
        name: what the message calls ``actual``.

    Returns:
        The largest ``|actual - expected|``, a ``float``.

    Raises:
        AssertionError: if an entry differs by more than its tolerance.
        ValueError: if the shapes differ, the tolerance does not broadcast to them or is
            negative or not finite, or an argument is a ragged sequence.
        TypeError: if an argument is ``None`` or not real numbers (complex, object), or a
            ``meta`` or sparse tensor, or ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {arguments.describe(name)}")
    over, diff, tol = largest_excess(actual, expected, tolerance)
    if over > 0 and math.isnan(tol):
        raise AssertionError(
            f"{name} and the expected values differ in their NaN or infinite entries (these "
            "must agree exactly; no tolerance applies)"
        )
    if over > 0:
        raise AssertionError(
            f"{name} differs from the expected values by {diff:.3g}, "
            f"more than the rounding tolerance {tol:.3g}"
        )
    return max_abs_diff(actual, expected)


def attention_tolerance(
    query: Any, key: Any, value: Any, params: Any, mask: Any = None, *, rotary: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """Entry-by-entry bounds on the difference between two routes to a multi-head layer.

    The dot-product bound is carried through the layer to first order in ``u``, entry by
    entry, using the magnitudes of the layer's own intermediate values (computed once in
    float64): with ``|.|`` taken entrywise and ``g_n`` for ``gamma_n``,

    - projections ``q = x W^Q + b``: ``dq = 2 g_D |x| |W^Q|`` (likewise ``dk``, ``dv``);
    - with rotary positions, the turned ``q' = q cos + q_partner sin`` (likewise ``k'``):
      ``dq' = dq |cos| + dq_partner |sin| + 2 t |q'|``, with ``|q'|`` taken as
      ``|q| |cos| + |q_partner| |sin|`` and ``t = 3u + (P + 2) u_64`` (two products and a sum
      with rounded cosines and sines, and the float64 angle ``p theta_i`` of a position up to
      ``P`` rounded relatively);
    - scores ``s = q k^T / sqrt(Dh)``: ``ds = (dq |k|^T + |q| dk^T + 2 g_Dh |q| |k|^T) / sqrt(Dh)``;
    - weights ``w = softmax(s)``: ``dw = w (ds + max_row ds + 2 g_(S+2))``, since a softmax
      weight moves relatively by at most its own score change plus the largest in its row;
    - head outputs ``o = w v``: ``do = dw |v| + w dv + 2 g_S w |v|``;
    - the output ``Concat(o) W^O + b_o``: ``do |W^O| + 2 g_D |o| |W^O|``.

    Args:
        query: ``(B, L, D)`` queries, NumPy array or torch tensor, in the dtype of the
            arithmetic being compared.
        key: ``(B, S, D)`` keys.
        value: ``(B, S, D)`` values.
        params: the layer's :class:`mha.MHAParams` (multi-head or grouped-query), of the
            inputs' dtype.
        mask: boolean keep-mask broadcastable to ``(B, H, L, S)``, or ``None``.
        rotary: the layer's rotary positions (:class:`mha.core.rotary.Rotary`), or ``None``;
            queries and keys at positions from 0 (a cached route that continues from a
            cache's length reaches the same positions).

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        ``(output_tolerance, weights_tolerance)``: float64 arrays of absolute bounds.

    Raises:
        TypeError: if ``params`` is not :class:`mha.MHAParams`; an input is not a floating
            array or tensor, or the three differ in dtype, or ``params`` have another dtype
            (NumPy and PyTorch may mix, as ``float32`` and ``torch.float32``); the mask is
            not boolean (a float
            ``0``/``-inf`` mask is refused, as by every backend) or is a ``meta`` tensor.
        ValueError: the shape and value errors of
            :func:`mha.backends.np_backend.multi_head_attention` (shapes, empty sequences, a mask
            that does not broadcast, NaN or infinite inputs, an odd ``d_head`` with
            ``rotary``), checked on the float64 copies.
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    check_float_inputs({"query": query, "key": key, "value": value}, "query, key and value")
    dtype, p_dtype = (str(d).removeprefix("torch.") for d in (query.dtype, params.dtype))
    if p_dtype != dtype:  # the layer refuses them: no route computes with them
        raise TypeError(
            f"params must have the inputs' dtype {dtype}, as the layer requires; got params of "
            f"dtype {p_dtype} (convert with params.to_numpy(...) or params.to_torch(...))"
        )
    f64 = np.float64
    named = {"query": query, "key": key, "value": value}
    x_q, x_k, x_v = (as_float64(n, t) for n, t in named.items())
    keep = None if mask is None else as_numpy("mask", mask)  # checked by the layer below
    # Grouped-query attention computes each head as multi-head attention does with its key
    # and value head repeated: the same bound.
    p = repeat_kv_heads(params.to_numpy(f64))
    _, w = np_backend.multi_head_attention(x_q, x_k, x_v, p, keep, rotary=rotary)  # (B, H, L, S)
    H, Dh, S = p.num_heads, p.d_head, x_k.shape[-2]
    g_d, g_h, g_s, g_w = (gamma(query, n) for n in (p.d_model, Dh, S, S + 2))
    root = np.sqrt(Dh)

    def project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, ...]:
        y = x @ w + (0.0 if b is None else b)  # (B, N, D)
        dy = 2 * g_d * (np.abs(x) @ np.abs(w))  # (B, N, D)
        return np.abs(np_backend.split_heads(y, H)), np_backend.split_heads(dy, H)

    (q, dq), (k, dk), (v, dv) = (
        project(x, w, b)
        for x, w, b in ((x_q, p.w_q, p.b_q), (x_k, p.w_k, p.b_k), (x_v, p.w_v, p.b_v))
    )  # (B, H, L|S, Dh) each
    if rotary is not None:  # turned queries and keys: their magnitudes and rounding
        turn = unit_roundoff(query) * 3 + unit_roundoff(f64) * (max(q.shape[2], k.shape[2]) + 1)
        (q, dq), (k, dk) = (_turned(x, dx, rotary, turn) for x, dx in ((q, dq), (k, dk)))
    kT, dkT = k.swapaxes(-1, -2), dk.swapaxes(-1, -2)
    ds = (dq @ kT + q @ dkT + 2 * g_h * (q @ kT)) / root  # (B, H, L, S)
    dw = w * (ds + ds.max(axis=-1, keepdims=True) + 2 * g_w)  # (B, H, L, S)
    o = w @ v  # (B, H, L, Dh)
    do = dw @ v + w @ dv + 2 * g_s * o  # (B, H, L, Dh)
    w_o = np.abs(p.w_o)
    d_out = np_backend.merge_heads(do) @ w_o + 2 * g_d * (np_backend.merge_heads(o) @ w_o)
    return d_out, dw


def latent_tolerance(
    x: Any, params: Any, mask: Any = None, *, rotary: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """Entry-by-entry bounds on the difference between two routes to a latent attention layer.

    Any two of :mod:`mha.backends.latent`'s computations of one layer (the explicit and the
    absorbed route, NumPy and PyTorch, a cached decoding and the full forward) agree within
    these bounds. Each route's error is carried through its own stages, to first order in
    ``u`` and from the magnitudes of the layer's intermediate values (computed once in
    float64), as :func:`attention_tolerance` does for multi-head attention; two routes differ
    by at most twice the larger of the two bounds, entry by entry. With ``|.|`` entrywise and
    ``g_n`` for ``gamma_n``, a product ``A B`` of ``n``-term sums adds ``dA |B| + |A| dB +
    g_n |A| |B|``, and:

    - both routes: the query latent ``x W^DQ``, the queries ``x' W^UQ``, the latents
      ``c = x W^DKV``; a rotation ``y -> y cos + y[partner] sin`` adds ``g_3`` (two products
      and a sum with rounded tables) and ``(2 + N) u`` (angles rounded at positions up to
      ``N``) of ``|y| + |y[partner]|``, and carries ``dy + dy[partner]``;
    - explicit: keys ``c W^UK_h`` and values ``c W^UV_h`` rebuilt, scores over ``Dh + Dr``
      terms, the weighted sum of the values, ``2u`` for the scale;
    - absorbed: the queries ``q_h (W^UK_h)^T``, scores over ``Dc + Dr`` terms (``4u`` for its
      two scale factors), the weighted sum of the latents, then ``W^UV_h``;
    - weights ``dw = w (ds + max_row ds + g_(N+2))`` from each route's score bound ``ds``;
      the output ``Concat(heads) W^O`` adds ``g_(H Dh)``.

    With ``Dr = 0`` and ``rotary``, the rotation turns the whole query and rebuilt key, which
    only the explicit route computes: its bound alone is doubled.

    Args:
        x: the input ``(B, N, D)``, NumPy array or torch tensor, in the dtype of the
            arithmetic being compared (the whole sequence, for a cached decoding).
        params: the layer's :class:`mha.core.latent_params.MLAParams`, of ``x``'s dtype.
        mask: boolean keep-mask broadcastable to ``(B, H, N, N)``, or ``None``.
        rotary: the layer's rotary positions, or ``None``.

    Shape:
        Returns ``(B, N, D)`` and ``(B, H, N, N)``.

    Returns:
        ``(output_tolerance, weights_tolerance)``: float64 arrays of absolute bounds.

    Raises:
        TypeError: if ``params`` is not ``MLAParams``, ``x`` is not a floating array or
            tensor, or ``params`` have another dtype.
        ValueError: the shape and value errors of
            :func:`mha.backends.latent.multi_head_latent_attention`, checked on float64 copies.
    """
    if not isinstance(params, MLAParams):
        raise TypeError(f"params must be MLAParams; got {type(params).__name__}")
    check_float_inputs({"x": x})
    dtype, p_dtype = (str(d).removeprefix("torch.") for d in (x.dtype, params.dtype))
    if p_dtype != dtype:
        raise TypeError(
            f"params must have the input's dtype {dtype}, as the layer requires; got params of "
            f"dtype {p_dtype} (convert with params.to_numpy(...) or params.to_torch(...))"
        )
    x64, p = as_float64("x", x), params.to_numpy(np.float64)
    keep = None if mask is None else as_numpy("mask", mask)
    _, w = latent.multi_head_latent_attention(x64, p, keep, route="explicit", rotary=rotary)
    H, Dh, Dc, Dr, D = p.num_heads, p.d_head, p.d_latent, p.d_rope, p.d_model
    N, u = x64.shape[1], unit_roundoff(x)
    naive = rotary is not None and not Dr  # rotary positions on the rebuilt keys

    def g(n: int) -> float:
        return gamma(x, n)

    def product(a: np.ndarray, da: Any, b: np.ndarray, terms: int) -> tuple[np.ndarray, Any]:
        """``a @ b`` (``b`` exact weights) and its bound: ``da |b| + g_n |a| |b|``."""
        ab, a_b = a @ b, np.abs(a) @ np.abs(b)
        return ab, (0.0 if da is None else da @ np.abs(b)) + g(terms) * a_b

    def turned(y: np.ndarray, dy: Any, offset_free: bool = True) -> tuple[np.ndarray, Any]:
        """A rotated ``y`` and its bound (the chain of the rotation's roundings added)."""
        pair = rotary.partners(y.shape[-1])
        ay = np.abs(y) + np.abs(y[..., pair])
        return rotate(y, rotary), dy + dy[..., pair] + (g(3) + (2 + N) * u) * ay

    def heads(y: np.ndarray) -> np.ndarray:  # (B, N, H W) -> (B, H, N, W)
        return np_backend.split_heads(y, H)

    def per_head(m: np.ndarray) -> np.ndarray:  # (Dc, H W) -> (H, Dc, W)
        return m.reshape(m.shape[0], H, -1).swapaxes(0, 1)

    # Both routes: the query latent, the queries, the latents, the rotary parts.
    x_q, d_xq = (x64, None) if p.w_dq is None else product(x64, None, p.w_dq, D)
    q, d_q = product(x_q, d_xq, p.w_uq, p.d_query_latent or D)
    q, d_q = heads(q), heads(d_q)  # (B, H, N, Dh)
    c, d_c = product(x64, None, p.w_dkv, D)  # (B, N, Dc)
    zero = np.zeros((*c.shape[:2], 0))
    q_r, d_qr, k_r, d_kr = zero[:, None], zero[:, None], zero, zero
    if Dr and p.w_qr is not None and p.w_kr is not None:  # Dr > 0: both are present
        q_r, d_qr = product(x_q, d_xq, p.w_qr, p.d_query_latent or D)
        q_r, d_qr = heads(q_r), heads(d_qr)  # (B, H, N, Dr)
        k_r, d_kr = product(x64, None, p.w_kr, D)  # (B, N, Dr)
        if rotary is not None:
            (q_r, d_qr), (k_r, d_kr) = turned(q_r, d_qr), turned(k_r, d_kr)
    k_r, d_kr = k_r[:, None], d_kr[:, None]  # (B, 1, N, Dr): shared by the heads

    def scores(a, da, b, db, terms, scale_roundings):  # (B, H, N, N) bound of a . b
        at, bt = np.abs(a), np.abs(b).swapaxes(-1, -2)
        return (
            da @ bt
            + at @ np.abs(db).swapaxes(-1, -2)
            + (g(terms) + scale_roundings * u) * (at @ bt)
        )

    def weights_bound(ds: np.ndarray) -> np.ndarray:
        ds = ds / math.sqrt(Dh + Dr)
        return w * (ds + ds.max(axis=-1, keepdims=True) + g(N + 2))

    def output_bound(o: np.ndarray, d_o: np.ndarray) -> np.ndarray:
        w_o = np.abs(p.w_o)
        merged = np_backend.merge_heads(np.abs(o))
        return np_backend.merge_heads(d_o) @ w_o + g(H * Dh) * (merged @ w_o)

    # The explicit route: keys and values rebuilt, then attention as multi-head attention.
    k, d_k = (heads(t) for t in product(c, d_c, p.w_uk, Dc))  # (B, H, N, Dh)
    v, d_v = (heads(t) for t in product(c, d_c, p.w_uv, Dc))
    q_e, dq_e = (q, d_q) if not naive else turned(q, d_q)
    k_e, dk_e = (k, d_k) if not naive else turned(k, d_k)
    ds = scores(q_e, dq_e, k_e, dk_e, Dh + Dr, 2) + scores(q_r, d_qr, k_r, d_kr, Dh + Dr, 2)
    dw_e = weights_bound(ds)
    o, d_o = w @ v, dw_e @ np.abs(v) + w @ d_v + g(N) * (w @ np.abs(v))
    d_out_e = output_bound(o, d_o)
    if naive:
        return 2 * d_out_e, 2 * dw_e
    # The absorbed route: W^UK folded into the queries, W^UV after the weighted sum.
    w_uk = per_head(p.w_uk)  # (H, Dc, Dh)
    q_c = q @ w_uk.swapaxes(-1, -2)  # (B, H, N, Dc)
    dq_c = d_q @ np.abs(w_uk).swapaxes(-1, -2) + g(Dh) * (np.abs(q) @ np.abs(w_uk).swapaxes(-1, -2))
    c_h, dc_h = c[:, None], d_c[:, None]  # (B, 1, N, Dc)
    ds = scores(q_c, dq_c, c_h, dc_h, Dc + Dr, 4) + scores(q_r, d_qr, k_r, d_kr, Dc + Dr, 4)
    dw_a = weights_bound(ds)
    o_c = w @ c_h  # (B, H, N, Dc)
    do_c = dw_a @ np.abs(c_h) + w @ dc_h + g(N) * (w @ np.abs(c_h))
    w_uv = per_head(p.w_uv)  # (H, Dc, Dh)
    o, d_o = o_c @ w_uv, do_c @ np.abs(w_uv) + g(Dc) * (np.abs(o_c) @ np.abs(w_uv))
    d_out_a = output_bound(o, d_o)
    return 2 * np.maximum(d_out_e, d_out_a), 2 * np.maximum(dw_e, dw_a)


def _turned(
    x: np.ndarray, dx: np.ndarray, rotary: Any, turn: float
) -> tuple[np.ndarray, np.ndarray]:
    """Magnitudes ``x >= 0`` turned by rotary positions from 0, and their error ``dx`` carried
    through the turn with its own rounding ``turn`` (see :func:`attention_tolerance`).

    Shape:
        x and dx ``(..., n, Dh)``; returns two of the same shape.
    """
    cos, sin = (np.abs(t) for t in rotary.tables(x.shape[-1], x.shape[-2]))  # 2 x (n, Dh)
    partner = rotary.partners(x.shape[-1])  # (Dh,)
    turned = x * cos + x[..., partner] * sin
    return turned, dx * cos + dx[..., partner] * sin + 2 * turn * turned


def online_softmax_tolerance(dtype: Any, *, terms: int, merges: int) -> tuple[float, float]:
    """How far two blockings of the same softmax may differ: the sum ``l`` and each weight.

    Both routes see the same scores ``z``; they differ in how the row is cut into blocks and
    merged (:func:`mha.backends.tiled.combine_stats`). A term ``exp(z_j - m)`` is computed as a
    product of at most ``merges + 1`` exponentials whose arguments, each rounded once, add up to
    ``x_j = z_j - m <= 0``; so it is off by a relative ``u |x_j| + (7 merges + 6) u``: each
    ``exp`` within 3 ulp (``6u``, ``u`` the unit roundoff; NumPy's own tests allow 3 ulp in
    float32, 1 in float64) and each product ``u``. Every addition on the way (in a block's sum
    or in a merge) is one of at most ``n - 1`` along any term's path. Since
    ``|x| exp(x) <= 1/e`` for ``x <= 0``, the size of the scores drops out: with ``n`` terms and
    ``l >= 1`` (its largest term is ``exp(0) = 1``) the sum is off by at most a relative

        ``r = u n / e + (7 merges + 6) u + gamma_n``,

    and a weight ``exp(x_j) / l <= 1`` by at most ``u / e + (7 merges + 7) u + r`` absolutely.
    Two routes differ by at most twice each bound.

    Args:
        dtype: the floating dtype of the arithmetic.
        terms: ``n``, the length of the row (allowed entries or all).
        merges: the largest number of combinations any block passes through (``k - 1`` for
            ``k`` blocks merged left to right; 0 for one block).

    Returns:
        ``(relative tolerance of l, absolute tolerance of each weight)``.

    Raises:
        TypeError: if ``terms`` or ``merges`` is not an int, or ``dtype`` is ``None`` or not
            floating.
        ValueError: if ``terms < 1``, ``merges < 0``, or the row is too long for the dtype.
    """
    g = gamma(dtype, terms)
    arguments.check_at_least("merges", merges, 0)
    u = unit_roundoff(dtype)
    row_sum = u * terms / math.e + (7 * merges + 6) * u + g
    weight = u / math.e + (7 * merges + 7) * u + row_sum
    return 2 * row_sum, 2 * weight


def tiled_attention_tolerance(
    query: np.ndarray, key: np.ndarray, value: np.ndarray
) -> tuple[float, float]:
    """How far two routes to the same attention output and log-sum-exp may differ.

    A bound for any two summation orders (the naive path, any blocking of the tiled one,
    another BLAS), to first order in the unit roundoff ``u``. With
    ``c >= max_ij sum_d |q_id k_jd| / sqrt(Dh)`` (here ``max ||q_i|| max ||k_j|| / sqrt(Dh)``)
    and ``gamma = gamma_n`` for ``n = max(S, Dh)`` (:func:`mha.numerics.tolerance.gamma`): a score
    is off by at most ``gamma c``, the maximum subtracted from it by as much, so each
    unnormalised weight is off by a relative ``2 gamma c + u``; the row sum adds
    ``gamma`` and the division ``u``, so a weight is off by a relative ``(4c + 3) gamma`` at
    most, and the output, a weighted average of the values, by that times ``max |v|`` plus
    ``gamma max |v|`` for its own sum. The log-sum-exp ``m + log l`` is off by at most
    ``2 gamma c`` (its maximum and the sum's scores) plus ``gamma`` (the sum's relative
    error) plus ``u |lse| <= u (c + log S)``. Each bound is doubled for two routes
    (:func:`mha.numerics.tolerance.rounding_tolerance`).

    Args:
        query: queries.
        key: keys.
        value: values.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``.

    Returns:
        ``(output tolerance, lse tolerance)``, absolute, for every entry.

    Raises:
        The errors of :func:`mha.backends.tiled.attention` for the arrays.
    """
    arrays.check_attention(query, key, value, None, numpy_arrays.NUMPY)
    S, Dh = key.shape[-2], query.shape[-1]
    q_max, k_max = (np.linalg.norm(x, axis=-1).max(initial=0.0) for x in (query, key))
    c_max = float(q_max * k_max / math.sqrt(Dh))  # initial: no rows at all (a batch of 0)
    terms = max(S, Dh)
    v_max = float(np.abs(value).max(initial=0.0))  # Dv = 0: an empty output
    out_tol = rounding_tolerance(query.dtype, terms=terms, scale=v_max * (4 * c_max + 4))
    lse_tol = rounding_tolerance(query.dtype, terms=terms, scale=3 * c_max + 1 + math.log(S))
    return out_tol, lse_tol


def attention_gradient_tolerance(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    weights: np.ndarray,
    d_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How far two routes to the gradients of attention alone may differ.

    The bound of :func:`gradient_tolerance` for attention alone
    (:func:`mha.numerics.backward.scaled_dot_product_attention`): the backward run in float64
    on magnitudes (absolute values, and ``A * (dA + rowsum(dA * A))`` for the softmax, with
    the dtype's ``tiny`` added to every rounded stage for underflow), times
    ``2 (8 + 4c + 4) gamma_n``: at most 8 rounded stages, and the weights' own relative error
    ``(4c + 4) gamma_n`` from the forward, ``c`` the largest score magnitude and ``n`` the
    longest sum.

    Args:
        query: the forward's queries.
        key: its keys.
        value: its values.
        weights: its attention weights.
        d_out: the gradient of the loss with respect to the output.

    Shape:
        As in :func:`mha.numerics.backward.scaled_dot_product_attention`. Returns tolerances of the
        shapes of query, key and value.

    Returns:
        Float64 tolerances ``(for d_query, for d_key, for d_value)``, entry by entry.

    Raises:
        The errors of :func:`mha.numerics.backward.scaled_dot_product_attention`.
    """
    magnitudes, c_max, n = backward.attention_gradient_magnitudes(query, key, value, weights, d_out)
    factor = 2 * (8 + 4 * c_max + 4) * gamma(query.dtype, n)
    d_query, d_key, d_value = (factor * m for m in magnitudes)
    return d_query, d_key, d_value


def gradient_tolerance(saved: backward.MHASaved, d_out: np.ndarray) -> backward.MHAGradients:
    """How far two routes to the gradients of a layer may differ (:mod:`mha.numerics.backward`).

    A first-order rounding bound, entry by entry, for any two summation orders (this module
    against autograd, the fused against the tiled backward, another BLAS). The backward
    pass is run once more in float64 on magnitudes: every input, weight and bias replaced by
    its absolute value and ``dZ = A * (dA - rowsum(dA * A))`` by ``A * (dA + rowsum(dA * A))``,
    so that each result bounds the sum of the absolute values of everything added into the
    gradient. Each of the at most 10 rounded stages of the chain errs by ``gamma_n`` relative
    to those magnitudes (``n`` the longest sum, :func:`gamma`), and the
    forward's weights ``A`` by a relative ``(4c + 4) gamma_n`` with ``c`` the largest score
    magnitude (as in :func:`tiled_attention_tolerance`). The tolerance is
    twice ``(10 + 4c + 4) gamma_n`` times the magnitude. Rotary positions add 8 stages: the
    turned queries and keys, and their gradients turned back, are each a sum of two products
    with rounded cosines and sines, off by ``3u`` relative to their magnitudes, within
    ``2 gamma_2 <= 2 gamma_n``.

    Underflow. The bound ``|fl(x) - x| <= u |x|`` holds in the normal range only; a result
    below the smallest normal number ``tiny`` is rounded to a multiple of the smallest
    subnormal ``eta = 2 u tiny``, with an absolute error up to ``eta / 2 = u tiny``. So every
    rounding errs by at most ``u (|x| + tiny)`` (Higham, 2nd ed., eq. 2.8), and a sum of
    ``n`` rounded products by at most ``gamma_n (sum_k |x_k y_k| + tiny)``. The magnitude
    pass therefore adds ``tiny`` to every rounded intermediate (projections, weights, each
    stage of the backward and each gradient) before it is used, so the underflow errors are
    carried through the later stages as the relative ones are. This matters only where a
    gradient is itself near or below ``tiny`` (in float32, about ``1e-38``: weights like
    ``e^-97``, whose gradients are subnormal and differ between routes by a few ``eta``).

    It forms the ``(B, H, L, S)`` weights (recomputed for the tiled form), so it is meant for
    tests and examples, not for long sequences.

    Args:
        saved: what :func:`mha.numerics.backward.multi_head_attention_forward` returned.
        d_out: the gradient of the loss with respect to the output.

    Shape:
        d_out ``(B, L, D)``.

    Returns:
        :class:`~mha.numerics.backward.MHAGradients` of float64 tolerances, each of its gradient's
        shape.

    Raises:
        The errors of :func:`mha.numerics.backward.multi_head_attention`.
    """
    magnitudes, c_max, n = backward.gradient_magnitudes(saved, d_out)
    stages = 10 if saved.rotary is None else 18
    factor = 2 * (stages + 4 * c_max + 4) * gamma(saved.query.dtype, n)
    p = magnitudes.d_params
    d_params = MHAParams(
        factor * p.w_qkv,
        factor * p.w_o,
        None if p.b_qkv is None else factor * p.b_qkv,
        None if p.b_o is None else factor * p.b_o,
        p.num_heads,
        p.num_kv_heads,
    )
    return backward.MHAGradients(
        factor * magnitudes.d_query,
        factor * magnitudes.d_key,
        factor * magnitudes.d_value,
        d_params,
    )
