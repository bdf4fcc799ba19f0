"""The gradients by hand of :mod:`mha.numerics.backward` against autograd, within a bound.

:func:`compare_with_autograd` runs one layer's forward and backward by hand and through
:func:`mha.backends.torch_backend.multi_head_attention` with autograd, and compares every
gradient entry by entry with :func:`mha.numerics.tolerance.gradient_tolerance`
(:class:`GradientCheck` says how much of the bound each used).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha.backends import torch_backend
from mha.core.params import MHAParams
from mha.core.rotary import Rotary
from mha.numerics import backward
from mha.numerics.tolerance import gradient_tolerance


@dataclass(frozen=True)
class GradientCheck:
    """One gradient by hand against autograd's (see :func:`compare_with_autograd`).

    Attributes:
        difference: the largest ``|by hand - autograd|`` over the entries.
        largest: the largest ``|autograd|`` entry (the gradient's size).
        used: the largest ``|by hand - autograd| / tolerance`` over the entries, the share of
            :func:`mha.numerics.tolerance.gradient_tolerance` used (at most 1 when the check
            passes).
    """

    difference: float
    largest: float
    used: float

    @property
    def relative(self) -> float:
        """``difference / largest``."""
        return self.difference / self.largest if self.largest else self.difference

    @property
    def within(self) -> bool:
        """Whether every entry is within its tolerance."""
        return self.used <= 1.0


def _grad_of(leaf: torch.Tensor) -> np.ndarray:
    """The gradient PyTorch accumulated on ``leaf``: zeros where nothing depends on it."""
    return np.zeros(tuple(leaf.shape)) if leaf.grad is None else leaf.grad.numpy()


def _check_against(ours: np.ndarray, theirs: np.ndarray, tol: np.ndarray) -> GradientCheck:
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    tol = np.asarray(tol, dtype=np.float64)
    used = np.where(tol > 0, diff / np.where(tol > 0, tol, 1.0), np.where(diff > 0, np.inf, 0.0))
    largest = np.abs(theirs).max(initial=0.0)  # initial: no entries (B = 0) differ by 0
    return GradientCheck(float(diff.max(initial=0.0)), float(largest), float(used.max(initial=0.0)))


def compare_with_autograd(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: MHAParams,
    d_out: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    form: str = "fused",
    block_q: int = backward.BACKWARD_BLOCKS[0],
    block_kv: int = backward.BACKWARD_BLOCKS[1],
    rotary: Rotary | None = None,
) -> dict[str, GradientCheck]:
    """Every gradient of :func:`~mha.numerics.backward.multi_head_attention` against autograd.

    The gradients by hand come from :func:`mha.numerics.backward.multi_head_attention_forward`
    (with ``form``) and :func:`mha.numerics.backward.multi_head_attention`; autograd's from the
    same layer in :func:`mha.backends.torch_backend.multi_head_attention` on copies of the inputs
    and parameters in the same dtype. Each is compared entry by entry with
    :func:`mha.numerics.tolerance.gradient_tolerance`. When
    one array is passed as query, key and value (self-attention, ``query is key is value``)
    autograd sees one input and returns one gradient, the sum of the three by hand.

    Args:
        query: queries.
        key: keys.
        value: values.
        params: the layer's parameters (NumPy, the inputs' dtype).
        d_out: the gradient of the loss with respect to the output.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)``.
        form: ``"fused"`` (weights stored) or ``"tiled"`` (recomputed from the log-sum-exp).
        block_q: query rows per tile (tiled form).
        block_kv: key/value rows per tile (tiled form).
        rotary: the layer's rotary positions, or ``None``.

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)``, d_out ``(B, L, D)``.

    Returns:
        ``{name: GradientCheck}`` for ``"d query"``, ``"d key"``, ``"d value"`` (or one
        ``"d inputs"`` for self-attention), ``"d w_qkv"``, ``"d w_o"`` and, when the layer has
        biases, ``"d b_qkv"`` and ``"d b_o"``.

    Raises:
        The errors of :func:`mha.numerics.backward.multi_head_attention_forward` and
        :func:`mha.numerics.backward.multi_head_attention`.
    """

    out, saved = backward.multi_head_attention_forward(
        query, key, value, params, mask, form=form, block_q=block_q, block_kv=block_kv,
        rotary=rotary,
    )  # fmt: skip
    ours = backward.multi_head_attention(saved, d_out)
    tol = gradient_tolerance(saved, d_out)
    p_t = params.to_torch().map(lambda t: t.requires_grad_())
    leaves = {id(x): torch.from_numpy(x.copy()).requires_grad_() for x in (query, key, value)}
    y_t, _ = torch_backend.multi_head_attention(
        leaves[id(query)], leaves[id(key)], leaves[id(value)], p_t,
        None if mask is None else torch.from_numpy(np.asarray(mask)), rotary=rotary,
    )  # fmt: skip
    y_t.backward(torch.from_numpy(d_out))
    checks = {}
    if query is key is value:
        checks["d inputs"] = _check_against(
            ours.d_query + ours.d_key + ours.d_value,
            _grad_of(leaves[id(query)]),
            tol.d_query + tol.d_key + tol.d_value,
        )
    else:
        sums: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # an array passed twice
        for name, x in (("query", query), ("key", key), ("value", value)):
            g, t = getattr(ours, f"d_{name}"), getattr(tol, f"d_{name}")
            g0, t0 = sums.get(id(x), (0, 0))
            sums[id(x)] = (g0 + g, t0 + t)
        for name, x in (("query", query), ("key", key), ("value", value)):
            if id(x) in sums:
                g, t = sums.pop(id(x))
                checks[f"d {name}"] = _check_against(g, _grad_of(leaves[id(x)]), t)
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        g = getattr(ours.d_params, name)
        if g is not None:
            ref = getattr(p_t, name).grad.numpy()
            checks[f"d {name}"] = _check_against(g, ref, getattr(tol.d_params, name))
    return checks
