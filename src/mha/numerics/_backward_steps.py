"""The arithmetic of :mod:`mha.numerics.backward`'s steps, unchecked: gradients and magnitudes.

Each function computes one step of the backward pass on arrays that the public function
calling it has checked: the gradient of a softmax, of attention from its stored weights and
of a linear map, summed over the axes an input was broadcast along; and the same steps run
on magnitudes, for :func:`mha.numerics.backward.gradient_magnitudes` and
:func:`mha.numerics.backward.attention_gradient_magnitudes`. The tiled backward's loop stays
in :mod:`mha.numerics.backward`, where the chapter on the backward pass shows it.
"""

from __future__ import annotations

import math

import numpy as np

from mha.core.rotary import Rotary


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the leading axes along which an input of ``shape`` was broadcast."""
    extra = grad.ndim - len(shape)
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def softmax_backward(weights: np.ndarray, d_weights: np.ndarray) -> np.ndarray:
    """``A * (dA - rowsum(dA * A))``, written over ``d_weights`` (returned)."""
    row = np.einsum("...j,...j->...", d_weights, weights)[..., None]  # (..., L, 1)
    d_weights -= row
    d_weights *= weights
    return d_weights


def sdpa_backward(q, k, v_, weights, d_out):
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    d_value = np.matmul(weights.swapaxes(-1, -2), d_out)  # (..., S, L) @ (..., L, Dv)
    d_weights = np.matmul(d_out, v_.swapaxes(-1, -2))  # (..., L, Dv) @ (..., Dv, S)
    d_scores = softmax_backward(weights, d_weights)  # (..., L, S)
    d_scores *= scale
    d_query = np.matmul(d_scores, k)  # (..., L, S) @ (..., S, Dh) -> (..., L, Dh)
    d_key = np.matmul(d_scores.swapaxes(-1, -2), q)  # (..., S, L) @ (..., L, Dh)
    return (
        unbroadcast(d_query, q.shape),
        unbroadcast(d_key, k.shape),
        unbroadcast(d_value, v_.shape),
    )


def linear_backward(
    x: np.ndarray, weight: np.ndarray, d_y: np.ndarray, bias: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    x2, dy2 = x.reshape(-1, x.shape[-1]), d_y.reshape(-1, d_y.shape[-1])  # (N, D_in), (N, D_out)
    d_weight = x2.T @ dy2  # (D_in, N) @ (N, D_out)
    d_bias = dy2.sum(axis=0) if bias else None  # (D_out,)
    return d_y @ weight.T, d_weight, d_bias  # (..., D_out) @ (D_out, D_in)


def sdpa_magnitudes(q, k, v_, weights, d_out, tiny):
    """The backward of attention on magnitudes (all inputs >= 0), and the largest score.

    ``dZ`` becomes ``A * (dA + rowsum(dA * A))``: every term that the true ``dZ`` adds or
    subtracts, counted with its absolute value. ``tiny`` (the dtype's smallest normal
    number) is added to every rounded intermediate and result, for underflow (see
    :func:`mha.numerics.backward.gradient_magnitudes`); the weights are expected to carry it
    already.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    c_max = float(np.matmul(q, k.swapaxes(-1, -2)).max(initial=0.0)) * scale  # 0: no scores
    d_v = np.matmul(weights.swapaxes(-1, -2), d_out) + tiny  # (..., S, Dv)
    d_a = np.matmul(d_out, v_.swapaxes(-1, -2)) + tiny  # (..., L, S)
    d_s = weights * (d_a + np.einsum("...j,...j->...", d_a, weights)[..., None] + tiny) * scale
    d_s += tiny  # (..., L, S)
    return np.matmul(d_s, k) + tiny, np.matmul(d_s.swapaxes(-1, -2), q) + tiny, d_v, c_max


def turned_magnitudes(x: np.ndarray, rotary: Rotary | None, tiny: float) -> np.ndarray:
    """A bound on ``|R x|`` and ``|R^T x|`` for magnitudes ``x >= 0``: ``x |cos| + x' |sin|``
    (``x'`` each coordinate's partner), plus ``tiny``; ``x`` itself without rotary positions.

    Shape:
        x ``(..., n, Dh)``, positions from 0; returns the same shape.
    """
    if rotary is None:
        return x
    cos, sin = rotary.tables(x.shape[-1], x.shape[-2])  # 2 x (n, Dh)
    return x * np.abs(cos) + x[..., rotary.partners(x.shape[-1])] * np.abs(sin) + tiny


def lifted(
    grads: tuple[np.ndarray, np.ndarray, np.ndarray | None], tiny: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(d_x, d_weight, d_bias)`` of :func:`linear_backward`, each plus ``tiny``."""
    d_x, d_weight, d_bias = grads
    return d_x + tiny, d_weight + tiny, None if d_bias is None else d_bias + tiny
