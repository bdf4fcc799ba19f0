"""The parameters of one multi-head attention layer, shared by both backends.

``MHAParams`` holds NumPy arrays or PyTorch tensors. The query, key and value weights
are stored packed side by side in one ``(D, 3D)`` matrix, so the packed form needs no
copy; ``w_q``, ``w_k`` and ``w_v`` are views of its three column blocks (the layout is
:mod:`mha.core.packing`'s). Weights multiply on the right: ``q = x @ w_q``.

Parameters are built by :func:`init_params` (random, from one seed, for either backend)
and :func:`planted_heads` (heads that attend where they are told, for testing detectors).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mha.core import packing
from mha.core._checks import arguments
from mha.core._checks.arguments import check_bool, check_seed, describe
from mha.core._checks.numpy_arrays import numpy_float_dtype
from mha.core._copies import numpy_copy, torch_copy

Array = Any  # a numpy.ndarray or a torch.Tensor


def _kind(x: Any) -> str | None:
    """``"numpy"`` or ``"torch"`` for an array of that library, else ``None``."""
    if isinstance(x, np.ndarray):
        return "numpy"
    torch = sys.modules.get("torch")  # never imported here: without torch, nothing is a tensor
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    return None


def _real_dtype(x: Array) -> bool:
    """Whether an array or tensor holds real numbers (floating or integer, not bool)."""
    if isinstance(x, np.ndarray):
        return x.dtype != np.bool_ and (
            np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
        )
    return x.dtype.is_floating_point or not (x.dtype.is_complex or str(x.dtype) == "torch.bool")


def _concat(parts: list[Array], axis: int) -> Array:
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=axis)
    import torch

    return torch.cat(parts, dim=axis)


@dataclass(frozen=True)
class MHAParams:
    """Weights and biases of a multi-head (or grouped-query) attention layer.

    With ``H_kv < H`` key/value heads (grouped-query attention; ``H_kv = 1`` is multi-query
    attention), each group of ``G = H / H_kv`` consecutive query heads shares one key head
    and one value head, and ``W_k``, ``W_v`` have ``H_kv Dh`` columns instead of ``D``.
    ``H_kv = H`` is multi-head attention, the square layout of ``nn.MultiheadAttention``.

    Args:
        w_qkv: query, key and value weights packed as ``[W_q | W_k | W_v]``.
        w_o: output weights ``W^O``.
        b_qkv: packed biases ``[b_q | b_k | b_v]``, or ``None`` for no input bias.
        b_o: output bias, or ``None``.
        num_heads: number of query heads H.
        num_kv_heads: number of key/value heads H_kv, dividing H; ``None`` reads it from
            the width of ``w_qkv`` (H for a ``(D, 3D)`` matrix).

    Shape:
        w_qkv ``(D, D + 2 H_kv Dh)`` (``(D, 3D)`` for multi-head attention), w_o
        ``(D, D)``, b_qkv ``(D + 2 H_kv Dh,)``, b_o ``(D,)``.

    Raises:
        ValueError: if a shape does not match, H does not divide D, or H_kv does not
            divide H.
        TypeError: if ``num_heads`` or ``num_kv_heads`` is not an int (a Python or NumPy
            integer, kept as a Python ``int``; not a bool), the arrays are not all NumPy
            arrays or all PyTorch tensors, or one holds no real numbers (bool, complex,
            object).
    """

    w_qkv: Array
    w_o: Array
    b_qkv: Array | None
    b_o: Array | None
    num_heads: int
    # None (the default) is read off w_qkv's width in __post_init__: always an int after it.
    num_kv_heads: int = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        named = {"w_qkv": self.w_qkv, "w_o": self.w_o, "b_qkv": self.b_qkv, "b_o": self.b_o}
        kinds = {}
        for name, x in named.items():
            if x is None and name in ("b_qkv", "b_o"):
                continue
            kinds[name] = _kind(x)
            if kinds[name] is None:
                raise TypeError(
                    f"{name} must be a numpy.ndarray or a torch.Tensor; got {type(x).__name__}"
                )
            if not _real_dtype(x):
                raise TypeError(f"{name} must hold real numbers; got dtype {x.dtype}")
        if len(set(kinds.values())) > 1:
            got = ", ".join(f"{name}={kind}" for name, kind in kinds.items())
            raise TypeError(f"all parameters must come from one library; got {got}")
        if self.w_qkv.ndim != 2:
            raise ValueError(
                f"w_qkv must have shape (D, D + 2 H_kv Dh); got {tuple(self.w_qkv.shape)}"
            )
        D, cols = self.w_qkv.shape
        object.__setattr__(self, "num_heads", arguments.layer_sizes(D, self.num_heads)[1])
        if self.num_kv_heads is not None:
            H_kv = arguments.size("num_kv_heads", self.num_kv_heads)
            object.__setattr__(self, "num_kv_heads", H_kv)
        Dh = D // self.num_heads
        if self.num_kv_heads is None:  # read H_kv off the width of the key and value blocks
            if (cols - D) % (2 * Dh) != 0 or cols <= D:
                raise ValueError(
                    f"w_qkv must have shape (D, D + 2 H_kv Dh) with Dh = {Dh}; "
                    f"got {tuple(self.w_qkv.shape)}"
                )
            object.__setattr__(self, "num_kv_heads", (cols - D) // (2 * Dh))
        packing.check_kv_heads(self.num_heads, self.num_kv_heads)
        width = D + 2 * packing.kv_width(D, self.num_heads, self.num_kv_heads)
        if cols != width:
            raise ValueError(
                f"w_qkv must have shape (D, D + 2 H_kv Dh) = ({D}, {width}) for "
                f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}; "
                f"got {tuple(self.w_qkv.shape)}"
            )
        expected = {"w_o": (D, D), "b_qkv": (width,), "b_o": (D,)}
        layouts = {"w_o": "(D, D)", "b_qkv": "(D + 2 H_kv Dh,)", "b_o": "(D,)"}
        for name, shape in expected.items():
            x = named[name]
            if x is not None and tuple(x.shape) != shape:
                raise ValueError(
                    f"{name} must have shape {layouts[name]} = {shape}; got {tuple(x.shape)}"
                )

    @classmethod
    def from_qkv(
        cls,
        w_q: Array,
        w_k: Array,
        w_v: Array,
        w_o: Array,
        num_heads: int,
        b_q: Array | None = None,
        b_k: Array | None = None,
        b_v: Array | None = None,
        b_o: Array | None = None,
    ) -> MHAParams:
        """Build parameters from separate query, key and value weights.

        The input biases are given all three or none. Key and value weights narrower than
        ``D`` (``H_kv Dh`` columns) make grouped-query attention.

        Args:
            w_q: query weights.
            w_k: key weights.
            w_v: value weights.
            w_o: output weights ``W^O``.
            num_heads: number of heads H.
            b_q: query bias, or ``None`` (then ``b_k`` and ``b_v`` are ``None`` too).
            b_k: key bias, or ``None``.
            b_v: value bias, or ``None``.
            b_o: output bias, or ``None``.

        Shape:
            w_q, w_o ``(D, D)``; w_k, w_v ``(D, H_kv Dh)``; b_q, b_o ``(D,)``; b_k, b_v
            ``(H_kv Dh,)``.

        Returns:
            ``MHAParams`` with the weights packed into a new ``w_qkv``.

        Raises:
            ValueError: if only some of the input biases are given, ``w_q`` differs from
                ``w_o`` in shape, ``w_k`` and ``w_v`` differ or have another number of
                rows, or as :class:`MHAParams`.
            TypeError: if a weight or bias is not a NumPy array or a PyTorch tensor, or as
                :class:`MHAParams`.
        """
        named = {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o, "b_q": b_q, "b_k": b_k}
        kinds = {}
        for name, x in {**named, "b_v": b_v, "b_o": b_o}.items():
            if x is None and name.startswith("b_"):
                continue
            kinds[name] = _kind(x)
            if kinds[name] is None:
                raise TypeError(
                    f"{name} must be a numpy.ndarray or a torch.Tensor; got {describe(x)}"
                )
        if len(set(kinds.values())) > 1:
            got = ", ".join(f"{name}={kind}" for name, kind in kinds.items())
            raise TypeError(f"all weights and biases must come from one library; got {got}")
        biases = (b_q, b_k, b_v)
        if any(b is None for b in biases) and not all(b is None for b in biases):
            got = ", ".join(
                f"{n}={None if b is None else tuple(b.shape)}"
                for n, b in zip(("b_q", "b_k", "b_v"), biases, strict=True)
            )
            raise ValueError(f"b_q, b_k and b_v must be given all three or none; got {got}")
        if tuple(w_q.shape) != tuple(w_o.shape):
            raise ValueError(
                f"w_q must have the shape of w_o {tuple(w_o.shape)}; got {tuple(w_q.shape)}"
            )
        if tuple(w_k.shape) != tuple(w_v.shape) or w_k.shape[0] != w_q.shape[0]:
            raise ValueError(
                "w_k and w_v must have one shape (D, H_kv Dh) with the rows of w_q; got "
                f"w_q {tuple(w_q.shape)}, w_k {tuple(w_k.shape)}, w_v {tuple(w_v.shape)}"
            )
        b_qkv = None if b_q is None else _concat([b_q, b_k, b_v], axis=0)
        return cls(_concat([w_q, w_k, w_v], axis=1), w_o, b_qkv, b_o, num_heads)

    @property
    def d_model(self) -> int:
        """Model width D."""
        return int(self.w_qkv.shape[0])

    @property
    def d_head(self) -> int:
        """Head width Dh = D // H."""
        return self.d_model // self.num_heads

    @property
    def group_size(self) -> int:
        """G = H / H_kv, the query heads that share one key/value head (1 for MHA)."""
        return self.num_heads // self.num_kv_heads

    @property
    def kv_width(self) -> int:
        """H_kv Dh, the columns of each of ``w_k`` and ``w_v`` (D for MHA)."""
        return self.num_kv_heads * self.d_head

    @property
    def dtype(self) -> Any:
        """The dtype of the weights."""
        return self.w_qkv.dtype

    def packed(self, projection: str) -> tuple[Array, Array | None]:
        """The weights and bias of one projection, or of adjacent ones, as views.

        Args:
            projection: ``"q"``, ``"k"``, ``"v"``, or ``"kv"`` (the key and value blocks
                side by side, which the packed form projects together in cross-attention).

        Shape:
            Returns ``(D, D)`` and ``(D,)`` for ``"q"``, ``(D, H_kv Dh)`` and
            ``(H_kv Dh,)`` for ``"k"`` and ``"v"``, twice as wide for ``"kv"``.

        Returns:
            ``(w, b)``: views of ``w_qkv`` and ``b_qkv`` (``b`` is ``None`` without input
            biases).

        Raises:
            ValueError: on an unknown projection.
        """
        cols = packing.projection_columns(self.d_model, projection, kv_cols=self.kv_width)
        return self.w_qkv[:, cols], None if self.b_qkv is None else self.b_qkv[cols]

    @property
    def w_q(self) -> Array:
        """Query weights ``(D, D)``, a view of ``w_qkv``."""
        return self.packed("q")[0]

    @property
    def w_k(self) -> Array:
        """Key weights ``(D, H_kv Dh)`` (``(D, D)`` for MHA), a view of ``w_qkv``."""
        return self.packed("k")[0]

    @property
    def w_v(self) -> Array:
        """Value weights ``(D, H_kv Dh)`` (``(D, D)`` for MHA), a view of ``w_qkv``."""
        return self.packed("v")[0]

    @property
    def b_q(self) -> Array | None:
        """Query bias ``(D,)`` or ``None``."""
        return self.packed("q")[1]

    @property
    def b_k(self) -> Array | None:
        """Key bias ``(H_kv Dh,)`` or ``None``."""
        return self.packed("k")[1]

    @property
    def b_v(self) -> Array | None:
        """Value bias ``(H_kv Dh,)`` or ``None``."""
        return self.packed("v")[1]

    def head(self, h: int) -> dict[str, Array | None]:
        """The weight and bias blocks of head ``h`` (views).

        Args:
            h: head index in ``[0, H)``.

        Shape:
            Returns ``w_q``, ``w_k``, ``w_v`` ``(D, Dh)`` (columns of head h; with
            grouped-query attention ``w_k`` and ``w_v`` are those of its key/value head
            ``h // G``, shared with the group), ``w_o`` ``(Dh, D)`` (its rows of W^O), and
            ``b_q``, ``b_k``, ``b_v`` ``(Dh,)``, each ``None`` when there is no input bias.
            The output bias ``b_o`` belongs to no head.

        Returns:
            ``{name: block}`` for ``w_q``, ``w_k``, ``w_v``, ``w_o``, ``b_q``, ``b_k``, ``b_v``.

        Raises:
            ValueError: if ``h`` is not in ``[0, H)``.
        """
        cols = packing.head_span(self.d_model, self.num_heads, h)
        kv = packing.head_span(self.kv_width, self.num_kv_heads, h // self.group_size)
        b_q, b_k, b_v = self.b_q, self.b_k, self.b_v
        return {
            "w_q": self.w_q[:, cols],
            "w_k": self.w_k[:, kv],
            "w_v": self.w_v[:, kv],
            "w_o": self.w_o[cols, :],
            "b_q": None if b_q is None else b_q[cols],
            "b_k": None if b_k is None else b_k[kv],
            "b_v": None if b_v is None else b_v[kv],
        }

    def map(self, fn: Any) -> MHAParams:
        """Apply ``fn`` to every array (e.g. a dtype cast); ``None`` biases stay ``None``.

        Args:
            fn: applied to each weight and present bias; returns an array or tensor.

        Returns:
            New ``MHAParams`` of the results (checked as at construction).

        Raises:
            TypeError: if ``fn`` is not callable, or as :class:`MHAParams` for its results.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable; got {describe(fn)}")
        return replace(
            self,
            w_qkv=fn(self.w_qkv),
            w_o=fn(self.w_o),
            b_qkv=None if self.b_qkv is None else fn(self.b_qkv),
            b_o=None if self.b_o is None else fn(self.b_o),
        )

    def to_numpy(self, dtype: Any = None) -> MHAParams:
        """A NumPy copy, cast to ``dtype`` if given.

        Args:
            dtype: NumPy dtype of the copy; ``None`` keeps each array's (bfloat16 becomes float32).

        Returns:
            ``MHAParams`` of NumPy arrays that share no memory with these.

        Raises:
            TypeError: if ``dtype`` is not ``None`` or a NumPy float16/float32/float64 dtype.
        """
        return numpy_copy(self, dtype, (np.float16, np.float32, np.float64))

    def to_torch(self, dtype: Any = None, device: Any = None) -> MHAParams:
        """A PyTorch copy, cast to ``dtype`` and moved to ``device`` if given.

        Args:
            dtype: torch dtype of the copy; ``None`` keeps each array's.
            device: where to put the copy; ``None`` for the CPU (or the tensors' device).

        Returns:
            ``MHAParams`` of PyTorch tensors that share no memory with these, not requiring grad.

        Raises:
            TypeError: if ``dtype`` is not ``None`` or a floating ``torch.dtype``, or
                ``device`` is not a device or a device name.
            ValueError: if ``device`` names no device available here.
        """
        return torch_copy(self, dtype, device)


def init_params(
    d_model: int,
    num_heads: int,
    *,
    num_kv_heads: int | None = None,
    bias: bool = True,
    seed: int = 0,
    dtype: Any = np.float64,
) -> MHAParams:
    """Random parameters drawn with NumPy from one seed, for either backend.

    Weights are drawn i.i.d. from ``N(0, 1/D)`` so that ``x @ W`` keeps the scale of
    ``x``; biases (when ``bias``) from ``N(0, 0.02^2)``, small but non-zero so that code
    which forgets a bias is caught by the tests. Use ``.to_torch()`` for PyTorch: the
    same seed then gives the same model in both backends.

    Args:
        d_model: model width D.
        num_heads: number of heads H; must divide D.
        num_kv_heads: key/value heads H_kv, dividing H (``None``: H, multi-head
            attention; the draws are then those of every earlier version of this function).
        bias: whether to draw the input and output biases (a bool).
        seed: seed of ``numpy.random.default_rng``, an int >= 0.
        dtype: NumPy floating dtype of the result (float32 or float64).

    Returns:
        ``MHAParams`` holding NumPy arrays.

    Raises:
        ValueError: if a size is not positive, H does not divide D, H_kv does not divide
            H, ``seed`` is negative, or the weights would pass what an array can hold.
        TypeError: if a size or ``seed`` is not an int (a Python or NumPy integer, not a
            bool), ``bias`` is not a bool, or ``dtype`` is not NumPy's float32/float64 (a
            torch dtype included).
    """
    D, H, _ = arguments.layer_sizes(d_model, num_heads, num_kv_heads)
    check_bool("bias", bias)
    check_seed("seed", seed)
    if dtype is None:  # np.dtype(None) would be float64
        raise TypeError("dtype must be float32 or float64; got None")
    dtype = numpy_float_dtype("dtype", dtype, (np.float32, np.float64))
    kv_cols = packing.kv_width(D, H, num_kv_heads)
    arguments.check_elements("d_model", D * (D + 2 * kv_cols), 8)
    rng = np.random.default_rng(int(seed))
    num_heads = H
    w_qkv = rng.standard_normal((D, D + 2 * kv_cols)) / np.sqrt(D)
    w_o = rng.standard_normal((D, D)) / np.sqrt(D)
    b_qkv = 0.02 * rng.standard_normal(D + 2 * kv_cols) if bias else None
    b_o = 0.02 * rng.standard_normal(D) if bias else None
    H_kv = num_heads if num_kv_heads is None else num_kv_heads
    params = MHAParams(w_qkv, w_o, b_qkv, b_o, num_heads, H_kv)
    return params.to_numpy(dtype)


def _kv_blocks(x: Array, num_kv_heads: int, d_head: int) -> Array:
    """The key or value columns ``(..., H_kv Dh)`` as ``(..., H_kv, Dh)`` (a view)."""
    return x.reshape(*x.shape[:-1], num_kv_heads, d_head)


def mean_pool_kv_heads(params: MHAParams, num_kv_heads: int) -> MHAParams:
    """Grouped-query parameters made from a wider layer by mean-pooling its key/value heads.

    Ainslie et al. (2023) convert a multi-head checkpoint this way before uptraining it: the
    key (and value) projection of new head ``g`` is the mean of those of the heads it
    replaces, ``W^K_g = (1/m) sum_{j < m} W^K_{g m + j}`` with ``m = H_kv(old) / H_kv(new)``,
    and likewise the biases. Query and output projections are unchanged. Pooling to the
    layer's own ``H_kv`` returns an equal copy.

    Args:
        params: the layer to convert (multi-head, or grouped-query with more key/value
            heads).
        num_kv_heads: the new H_kv; must divide ``params.num_kv_heads`` (and so H).

    Returns:
        New ``MHAParams`` of the same library and dtype, with ``num_kv_heads`` key/value
        heads.

    Raises:
        ValueError: if ``num_kv_heads`` is not positive or does not divide the layer's
            key/value heads.
        TypeError: if ``params`` is not ``MHAParams`` or ``num_kv_heads`` is not an int (a
            Python or NumPy integer, not a bool).
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    packing.check_kv_heads(params.num_kv_heads, num_kv_heads)
    num_kv_heads = int(num_kv_heads)
    m, Dh = params.num_kv_heads // num_kv_heads, params.d_head

    def pool(x: Array) -> Array:  # (..., H_kv Dh) -> (..., H_kv' Dh)
        blocks = _kv_blocks(x, num_kv_heads, m * Dh)  # (..., H_kv', m Dh)
        blocks = blocks.reshape(*x.shape[:-1], num_kv_heads, m, Dh)  # (..., H_kv', m, Dh)
        return blocks.mean(-2).reshape(*x.shape[:-1], num_kv_heads * Dh)

    w_q, b_q = params.packed("q")
    w_kv = [pool(params.packed(p)[0]) for p in ("k", "v")]
    b_kv = None if params.b_qkv is None else [pool(params.packed(p)[1]) for p in ("k", "v")]
    w_qkv = _concat([w_q, *w_kv], axis=1)
    b_qkv = None if b_kv is None else _concat([b_q, *b_kv], axis=0)
    return MHAParams(w_qkv, params.w_o, b_qkv, params.b_o, params.num_heads, num_kv_heads)


def repeat_kv_heads(params: MHAParams) -> MHAParams:
    """The multi-head layer that computes what a grouped-query layer computes.

    Each key/value head is repeated for the ``G`` query heads of its group (as
    ``repeat_interleave`` along the heads), so the result has ``H_kv = H`` and the square
    layout that ``nn.MultiheadAttention`` and :func:`mha.to_torch_mha` take.

    Args:
        params: grouped-query (or multi-head) parameters.

    Returns:
        New multi-head ``MHAParams`` of the same library and dtype.

    Raises:
        TypeError: if ``params`` is not ``MHAParams``.
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    G, H, Dh = params.group_size, params.num_heads, params.d_head

    def repeat(x: Array) -> Array:  # (..., H_kv Dh) -> (..., H Dh)
        blocks = _kv_blocks(x, params.num_kv_heads, Dh)  # (..., H_kv, Dh)
        if isinstance(blocks, np.ndarray):
            blocks = np.repeat(blocks, G, axis=-2)
        else:
            blocks = blocks.repeat_interleave(G, dim=-2)  # (..., H, Dh)
        return blocks.reshape(*x.shape[:-1], H * Dh)

    w_q, b_q = params.packed("q")
    w_kv = [repeat(params.packed(p)[0]) for p in ("k", "v")]
    b_kv = None if params.b_qkv is None else [repeat(params.packed(p)[1]) for p in ("k", "v")]
    w_qkv = _concat([w_q, *w_kv], axis=1)
    b_qkv = None if b_kv is None else _concat([b_q, *b_kv], axis=0)
    return MHAParams(w_qkv, params.w_o, b_qkv, params.b_o, H, H)


def planted_heads(
    targets: Sequence[Sequence[int]], d_model: int, *, logit: float = 8.0
) -> tuple[MHAParams, np.ndarray]:
    """Multi-head attention whose head ``h`` sends query ``i`` to key ``targets[h][i]``.

    The input ``x`` holds one-hot positions: ``x[0, i] = e_i`` (then zeros up to D). Head h
    gets ``W_q`` mapping ``e_i`` to ``c * e_{t(i)}`` and ``W_k`` mapping ``e_j`` to ``e_j``
    inside its own Dh columns (``c = logit * sqrt(Dh)``), so its scores are
    ``q_i . k_j / sqrt(Dh) = logit * [j == t(i)]``: after the softmax, query ``i`` puts
    ``e^logit / (e^logit + n_i - 1)`` on its target, with ``n_i`` the keys it may attend to.
    ``W_v`` copies the positions into each head's columns and ``W_o`` is the identity, so
    the output says which positions each head read. No biases.

    Args:
        targets: for each head, the key position each query points to.
        d_model: model width D; ``num_heads = len(targets)`` must divide it, and the
            head width Dh must be at least L.
        logit: the score of a target (the others score 0).

    Shape:
        Returns params (D = d_model, H = len(targets)) and x ``(1, L, D)``.

    Returns:
        ``(params, x)``: NumPy float64 parameters without biases, and the one-hot input.

    Raises:
        ValueError: if there is no head or no query, the heads have different lengths, a
            target is out of range, Dh < L, ``d_model`` is not positive, or ``logit`` is
            not finite.
        TypeError: if ``targets`` is not a list of lists of ints (Python or NumPy, not
            bool), ``d_model`` is not an int, or ``logit`` is not a real number.
    """
    heads = [
        arguments.items(f"targets[{h}]", t)
        for h, t in enumerate(arguments.items("targets", targets))
    ]
    d_model = arguments.size("d_model", d_model)
    logit = arguments.number("logit", logit)
    H = len(heads)
    if H == 0:
        raise ValueError("targets must hold one list of positions per head; got none")
    L = len(heads[0])
    if any(len(t) != L for t in heads):
        raise ValueError(
            "targets must give every head the same number of queries; got "
            f"{[len(t) for t in heads]}"
        )
    if L == 0:
        raise ValueError("targets must give each head at least one query; got none")
    for h, t in enumerate(heads):
        for i, v in enumerate(t):
            if not arguments.integral(v):
                raise TypeError(f"targets[{h}][{i}] must be an int; got {describe(v)}")
    if d_model % H != 0 or d_model // H < L:
        raise ValueError(
            f"d_model must be a multiple of num_heads={H} with d_head >= L={L}; "
            f"got d_model={d_model}"
        )
    arguments.check_elements("d_model", d_model * d_model, 8)
    positions = np.array([[int(v) for v in row] for row in heads], dtype=np.int64)  # (H, L)
    if (positions < 0).any() or (positions >= L).any():
        raise ValueError(
            f"targets must be integer positions in [0, L={L}); got {positions.tolist()}"
        )
    Dh = d_model // H
    c = logit * np.sqrt(Dh)
    w_q, w_k, w_v = (np.zeros((d_model, d_model)) for _ in range(3))
    pos = np.arange(L)
    for h in range(H):
        w_q[pos, h * Dh + positions[h]] = c  # e_i -> c e_{t(i)} in head h's columns
        w_k[pos, h * Dh + pos] = 1.0  # e_j -> e_j
        w_v[pos, h * Dh + pos] = 1.0
    x = np.zeros((1, L, d_model))
    x[0, pos, pos] = 1.0  # one-hot positions, (1, L, D)
    params = MHAParams.from_qkv(w_q, w_k, w_v, np.eye(d_model), H)
    return params, x
