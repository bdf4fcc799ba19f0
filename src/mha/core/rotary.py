"""Rotary position embeddings (RoPE): positions as rotations of queries and keys, NumPy or PyTorch.

Su et al. (2021) give a head position information inside the scores themselves. The ``Dh``
coordinates of a query or key at position ``p`` are taken as ``Dh / 2`` pairs, and pair ``i``
is turned by the angle ``p theta_i``, with ``theta_i = base ** (-2 i / Dh)`` (the first
pair turns fastest, by one radian per position; the last slowest). A rotation keeps
lengths and composes by adding angles, so the score of a query rotated to ``p`` and a key
rotated to ``s`` is

    ``(R_p q) . (R_s k) = q . (R_(s - p) k)``,

a function of the distance ``s - p`` only. Nothing is added to the token's vector, and a key
once rotated never changes again: a key/value cache holds keys after their rotation.

**Which coordinates make a pair** is a convention that a model's weights are stored for
(:data:`PAIRINGS`):

- ``"interleaved"``: pairs ``(2i, 2i + 1)``, as in the paper, Meta's original LLaMA code and
  GGUF files. llama.cpp's converter permutes the rows of each query and key projection of a
  Hugging Face checkpoint into this order (:func:`interleave_permutation`).
- ``"halves"``: pairs ``(i, i + Dh / 2)``, the ``rotate_half`` of Hugging Face
  ``transformers`` (and GPT-NeoX).

The two are the same rotation of permuted coordinates: with the query and key weights'
columns permuted alike, they give the same scores. :func:`rotate` works on NumPy arrays and
on PyTorch tensors alike (the result has the input's library, dtype and device; autograd
records it); the angles are computed in float64 and rounded once to the input's dtype. Its
``inverse=True`` turns back, the transpose that carries a gradient through the rotation.

**In the layer.** Every form of ``multi_head_attention`` in both backends takes ``rotary=``
and calls :func:`rotated` between its projections and its scores: the queries and keys are
turned from a key/value cache's length on (0 without one), the keys before they are cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from mha.core._checks import arguments, numpy_arrays

PAIRINGS = ("interleaved", "halves")
"""The two ways of pairing a head's coordinates for rotation (see the module docstring)."""


@dataclass(frozen=True)
class Rotary:
    """How queries and keys are rotated by position: the frequency base and the pairing.

    Args:
        base: the base of the frequencies, ``theta_i = base ** (-2 i / Dh)``: 10,000 in Su
            et al. and Llama 2, 100,000 in SmolLM2, 500,000 in Llama 3. A real number above 1.
        pairing: ``"interleaved"`` (pairs ``(2i, 2i + 1)``, GGUF files) or ``"halves"``
            (pairs ``(i, i + Dh / 2)``, Hugging Face ``transformers``); see :data:`PAIRINGS`.

    Raises:
        TypeError: if ``base`` is not a real number or ``pairing`` is not a string.
        ValueError: if ``base`` is not finite and above 1, or ``pairing`` is not one of
            :data:`PAIRINGS`.
    """

    base: float = 10_000.0
    pairing: str = "interleaved"

    def __post_init__(self) -> None:
        if isinstance(self.base, bool) or not isinstance(self.base, Real):
            raise TypeError(
                f"base must be a real number (int or float); got {arguments.describe(self.base)}"
            )
        if not (arguments.is_finite_real(self.base) and self.base > 1):
            raise ValueError(f"base must be finite and above 1; got base={self.base!r}")
        if not isinstance(self.pairing, str):
            raise TypeError(f"pairing must be a str; got {arguments.describe(self.pairing)}")
        if self.pairing not in PAIRINGS:
            raise ValueError(
                f"pairing must be 'interleaved' or 'halves'; got pairing={self.pairing!r}"
            )
        object.__setattr__(self, "base", float(self.base))

    def frequencies(self, d_head: int) -> np.ndarray:
        """``theta_i = base ** (-2 i / Dh)`` for each pair ``i``, in radians per position.

        Args:
            d_head: Dh, the width rotated; even.

        Shape:
            Returns ``(Dh / 2,)``.

        Returns:
            The frequencies, float64, from 1 down to ``base ** (-(Dh - 2) / Dh)``.

        Raises:
            ValueError: if ``d_head`` is not a positive even int.
            TypeError: if ``d_head`` is not an int.
        """
        _check_width(d_head)
        return self.base ** (-np.arange(0, d_head, 2) / d_head)

    def angles(self, d_head: int, length: int, offset: int = 0) -> np.ndarray:
        """The angle ``p theta_i`` of every pair at positions ``p = offset, ..., offset + n - 1``.

        Args:
            d_head: Dh; even.
            length: n, the number of positions.
            offset: the first position (a cache's length, when new tokens follow cached ones).

        Shape:
            Returns ``(n, Dh / 2)``.

        Returns:
            The angles in radians, float64.

        Raises:
            ValueError: if ``d_head`` is not positive and even, or ``length`` or ``offset``
                is negative.
            TypeError: if a size is not an int.
        """
        arguments.check_at_least("length", length, 0)
        arguments.check_at_least("offset", offset, 0)
        positions = np.arange(offset, offset + length, dtype=np.float64)  # (n,)
        return np.outer(positions, self.frequencies(d_head))  # (n, Dh / 2)

    def partners(self, d_head: int) -> np.ndarray:
        """The coordinate each coordinate is paired with: ``[1, 0, 3, 2, ...]`` or halves swapped.

        Args:
            d_head: Dh; even.

        Shape:
            Returns ``(Dh,)``.

        Returns:
            An int64 permutation that is its own inverse.

        Raises:
            ValueError: if ``d_head`` is not a positive even int.
            TypeError: if ``d_head`` is not an int.
        """
        _check_width(d_head)
        index = np.arange(d_head)
        if self.pairing == "interleaved":
            return index ^ 1  # (2i, 2i + 1) -> (2i + 1, 2i)
        return np.roll(index, d_head // 2)  # (i, i + Dh/2) -> (i + Dh/2, i)

    def tables(self, d_head: int, length: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The cosines and signed sines that :func:`rotate` multiplies by, one per coordinate.

        With ``c = cos(p theta_i)`` and ``s = sin(p theta_i)``, the pair ``(a, b)`` becomes
        ``(a c - b s, b c + a s)``: the first coordinate of a pair gets ``-s``, the second
        ``+s``, so that ``rotate(x) = x * cos + x[..., partners] * sin``.

        Args:
            d_head: Dh; even.
            length: n, the number of positions.
            offset: the first position.

        Shape:
            Returns two ``(n, Dh)`` arrays.

        Returns:
            ``(cos, sin)``, float64.

        Raises:
            ValueError, TypeError: as :meth:`angles`.
        """
        theta = self.angles(d_head, length, offset)  # (n, Dh / 2)
        cos, sin = np.cos(theta), np.sin(theta)
        if self.pairing == "interleaved":
            pair_cos = np.repeat(cos, 2, axis=-1)  # (n, Dh / 2) -> (n, Dh): c0 c0 c1 c1 ...
            pair_sin = np.stack([-sin, sin], axis=-1).reshape(length, d_head)  # -s0 s0 -s1 s1
        else:
            pair_cos = np.concatenate([cos, cos], axis=-1)  # (n, Dh): c0 c1 ... c0 c1 ...
            pair_sin = np.concatenate([-sin, sin], axis=-1)  # -s0 -s1 ... s0 s1 ...
        return pair_cos, pair_sin


def _check_width(d_head: Any) -> None:
    arguments.check_positive("d_head", d_head)
    if d_head % 2:
        raise ValueError(
            f"d_head must be even: rotary positions turn pairs of coordinates; got d_head={d_head}"
        )


def _check_input(x: Any, rotary: Any, offset: Any, inverse: Any) -> None:
    """Check ``rotate``'s arguments (the library, dtype and shape of ``x``; not its values)."""
    if not isinstance(rotary, Rotary):
        raise TypeError(f"rotary must be a Rotary; got {arguments.describe(rotary)}")
    arguments.check_at_least("offset", offset, 0)
    arguments.check_bool("inverse", inverse)
    if isinstance(x, np.ndarray):
        numpy_arrays.check_array("x", x, check_finite=False)
    elif type(x).__module__.startswith("torch") and hasattr(x, "is_floating_point"):
        arguments.check_dense("x", x)
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating tensor; got dtype {x.dtype}")
    else:
        raise TypeError(f"x must be a numpy.ndarray or a torch.Tensor; got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., n, Dh); got {x.ndim}-D shape {tuple(x.shape)}")
    if x.shape[-1] == 0 or x.shape[-1] % 2:
        raise ValueError(
            "x must have an even, positive head width Dh (last dimension): rotary positions "
            f"turn pairs of coordinates; got shape {tuple(x.shape)}"
        )


def _like(x: Any, table: np.ndarray) -> Any:
    """A float64 table in ``x``'s library, dtype and device (rounded once)."""
    if isinstance(x, np.ndarray):
        return table.astype(x.dtype)
    import torch  # only tensors reach here: ``import mha`` does not need torch

    return torch.as_tensor(table, device=x.device).to(x.dtype)


def rotate(
    x: Any, rotary: Rotary, *, offset: int = 0, inverse: bool = False
) -> Any:  # fmt: skip
    """Rotate queries or keys by their positions: ``x * cos + x[..., partners] * sin``.

    Position ``p`` of ``x`` (along its second-to-last axis) is ``offset + p``: 0 for a whole
    sequence, a cache's length for the tokens that follow it. Each pair of coordinates of a
    head is turned by its own angle (:meth:`Rotary.tables`).

    Args:
        x: queries or keys, one row per position: a float NumPy array (float32 or float64)
            or a floating, dense PyTorch tensor (any device; autograd records the rotation).
        rotary: the base and pairing of the rotation.
        offset: the position of the first row, an int ``>= 0``.
        inverse: turn each pair back by its angle instead (the sines negated): the
            transposed rotation, which carries a gradient back through :func:`rotate`.

    Shape:
        x ``(..., n, Dh)``, e.g. ``(B, H, L, Dh)``; returns the same shape.

    Returns:
        A new array or tensor of ``x``'s library, dtype and device. Each row keeps its norm
        (to rounding); row 0 at ``offset = 0`` is ``x``'s row 0 exactly.

    Raises:
        ValueError: if ``x`` has fewer than 2 dimensions or an odd or zero width, or
            ``offset`` is negative.
        TypeError: if ``x`` is not a float array or tensor, ``rotary`` is not a
            :class:`Rotary`, ``offset`` is not an int, or ``inverse`` is not a bool.
    """
    _check_input(x, rotary, offset, inverse)
    n, d_head = x.shape[-2], x.shape[-1]
    # 2 x (n, Dh)
    cos, sin = (_like(x, t) for t in rotary.tables(d_head, n, offset))
    partner = rotary.partners(d_head)  # (Dh,)
    if not isinstance(x, np.ndarray):
        partner = _like(x, partner).long()
    # (..., n, Dh), pairs turned
    return x * cos + x[..., partner] * (-sin if inverse else sin)


def rotated(q: Any, k: Any, rotary: Rotary | None, cache: Any = None) -> tuple[Any, Any]:
    """A layer's queries and keys rotated to their positions; ``rotary=None`` leaves them be.

    What every form of multi-head attention does between its projections and its scores.
    The new positions follow those a key/value cache already holds: query ``i`` and key
    ``j`` of this call sit at ``cache.length + i`` and ``cache.length + j`` (from 0 without a
    cache, for cross-attention too). Keys are rotated before they are cached, so a cached
    key is never turned again. Only the positions matter, so a key/value head is rotated
    once, whatever the number of query heads it serves.

    Args:
        q: query heads.
        k: key heads.
        rotary: the rotation, or ``None`` for no rotary positions (``q`` and ``k`` returned
            as they are, the same objects).
        cache: the cache the keys will join (anything with a ``length``), or ``None``.

    Shape:
        q ``(..., L, Dh)``, k ``(..., S, Dh)``, e.g. ``(B, H, L, Dh)`` and
        ``(B, H_kv, S, Dh)``; returns the same shapes.

    Returns:
        ``(q, k)``, rotated by :func:`rotate` from position ``cache.length`` (or 0).
    """
    if rotary is None:
        return q, k
    offset = 0 if cache is None else cache.length  # new positions follow the cached ones
    return rotate(q, rotary, offset=offset), rotate(k, rotary, offset=offset)


def interleave_permutation(d_head: int) -> np.ndarray:
    """The order of a head's coordinates that turns the ``"halves"`` pairing into ``"interleaved"``.

    ``y = x[..., perm]`` puts coordinates ``i`` and ``i + Dh / 2`` of ``x`` next to each
    other, at ``2i`` and ``2i + 1``: ``rotate(x[..., perm], Rotary(b, "interleaved"))`` equals
    ``rotate(x, Rotary(b, "halves"))[..., perm]``. Applied to the columns of each head's
    query and key weights, it is the permutation llama.cpp's converter applies to the rows of
    Hugging Face's ``q_proj`` and ``k_proj``.

    Args:
        d_head: Dh; even.

    Shape:
        Returns ``(Dh,)``.

    Returns:
        An int64 permutation: ``[0, Dh/2, 1, Dh/2 + 1, ...]``.

    Raises:
        ValueError: if ``d_head`` is not a positive even int.
        TypeError: if ``d_head`` is not an int.
    """
    _check_width(d_head)
    half = d_head // 2
    return np.stack([np.arange(half), np.arange(half) + half], axis=-1).reshape(d_head)
