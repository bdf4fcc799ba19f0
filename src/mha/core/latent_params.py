"""The parameters of one multi-head latent attention layer (DeepSeek-V2), for both backends.

Multi-head latent attention (MLA) caches, for each position, one *latent* vector of width
``Dc``, from which every head's key and value is rebuilt, and one *rotary key* of width
``Dr`` that every head shares (DeepSeek-AI, 2024). With ``x`` a position's input (a row,
weights on the right, as everywhere in this package)::

    c   = x W^DKV                   latent, (Dc,): what the cache keeps
    k_h = c W^UK_h,  v_h = c W^UV_h  head h's key and value, rebuilt, (Dh,) each
    k_r = rotate(x W^KR)            the rotary key, shared by the heads, (Dr,): cached too
    q_h = x' W^UQ_h                  head h's query, (Dh,)
    q_rh = rotate(x' W^QR_h)         head h's rotary query, (Dr,)

with ``x' = x W^DQ`` (a low-rank query, width ``Dc'``) or ``x' = x`` (no query latent).
Head ``h``'s score of key ``j`` is ``(q_h . k_hj + q_rh . k_rj) / sqrt(Dh + Dr)``, its output
``sum_j a_hj v_hj``, and the layer's ``Concat(heads) W^O``. There are no biases.

:class:`MLAParams` holds the weights (NumPy arrays or PyTorch tensors, all of one library
and dtype), each as the matrix its product takes; :func:`init_mla_params` draws them from one
seed. The attention itself, with its two routes, is :mod:`mha.backends.latent`; the cache
is :class:`mha.core.kv_cache.LatentCache`.

**Widths.** ``Dr`` is even (rotary positions turn pairs of coordinates), and 0 for a layer
without decoupled rotary keys. A latent may be at most as wide as what it rebuilds:
``Dc <= 2 H Dh`` (the keys and the values of every head), and ``Dc' <= H (Dh + Dr)`` (every
head's query). A wider latent would cache more than multi-head attention does, and its extra
directions could only be lost by the up-projections, whose rank is at most those widths.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from mha.core._checks.arguments import (
    check_at_least,
    check_positive,
    check_positive_sizes,
    check_same_dtype,
    check_seed,
)
from mha.core._checks.numpy_arrays import numpy_float_dtype
from mha.core._copies import numpy_copy, torch_copy

Array = Any  # a numpy.ndarray or a torch.Tensor


def _library(x: Any) -> str | None:
    """``"numpy"`` or ``"torch"`` for an array of that library, else ``None``."""
    if isinstance(x, np.ndarray):
        return "numpy"
    torch = sys.modules.get("torch")  # never imported here: without torch, nothing is a tensor
    return "torch" if torch is not None and isinstance(x, torch.Tensor) else None


@dataclass(frozen=True)
class MLAParams:
    """Weights of a multi-head latent attention layer (no biases).

    Args:
        w_dkv: ``W^DKV``, the down-projection of the input to the latent.
        w_uk: ``W^UK``, the key up-projection: every head's ``W^UK_h`` side by side.
        w_uv: ``W^UV``, the value up-projection, laid out as ``w_uk``.
        w_uq: ``W^UQ``, the query projection (from the query latent when there is one).
        w_o: ``W^O``, the output projection.
        num_heads: the number of heads, H.
        w_kr: ``W^KR``, the rotary key's projection, or ``None`` for ``Dr = 0``.
        w_qr: ``W^QR``, every head's rotary query projection side by side, or ``None``
            (given with ``w_kr`` or not at all).
        w_dq: ``W^DQ``, the query's down-projection to its latent, or ``None`` for queries
            projected from the input directly.

    Shape:
        With ``D`` the model width, ``Dq = Dc'`` with a query latent and ``D`` without:
        w_dkv ``(D, Dc)``; w_uk and w_uv ``(Dc, H Dh)``; w_uq ``(Dq, H Dh)``; w_o
        ``(H Dh, D)``; w_kr ``(D, Dr)``; w_qr ``(Dq, H Dr)``; w_dq ``(D, Dc')``.

    Raises:
        ValueError: if a weight is not 2-D or does not fit the others' shapes, H does not
            divide the width of ``w_uk`` or ``w_qr``, ``Dr`` is odd, only one of ``w_kr``
            and ``w_qr`` is given, or a latent is wider than the heads it feeds
            (``Dc > 2 H Dh``, ``Dc' > H (Dh + Dr)``).
        TypeError: if ``num_heads`` is not an int, or the weights are not all NumPy arrays
            or all PyTorch tensors of one dtype.
    """

    w_dkv: Array
    w_uk: Array
    w_uv: Array
    w_uq: Array
    w_o: Array
    num_heads: int
    w_kr: Array | None = None
    w_qr: Array | None = None
    w_dq: Array | None = None

    def __post_init__(self) -> None:
        named = self.arrays()
        kinds = {name: _library(x) for name, x in named.items()}
        for name, kind in kinds.items():
            if kind is None:
                raise TypeError(
                    f"{name} must be a numpy.ndarray or a torch.Tensor; got "
                    f"{type(named[name]).__name__}"
                )
        if len(set(kinds.values())) > 1:
            got = ", ".join(f"{name}={kind}" for name, kind in kinds.items())
            raise TypeError(f"all parameters must come from one library; got {got}")
        check_same_dtype(named)
        check_positive("num_heads", self.num_heads)
        for name, x in named.items():
            if x.ndim != 2:
                raise ValueError(f"{name} must be a 2-D matrix; got shape {tuple(x.shape)}")
        if (self.w_kr is None) != (self.w_qr is None):
            raise ValueError(
                "w_kr and w_qr must be given both (decoupled rotary keys and queries) or "
                f"neither; got w_kr={_shape(self.w_kr)}, w_qr={_shape(self.w_qr)}"
            )
        H, (D, Dc) = self.num_heads, tuple(self.w_dkv.shape)
        heads_width = self.w_uk.shape[1]
        if heads_width % H:
            raise ValueError(
                f"w_uk must have H Dh columns, a multiple of num_heads={H}; got "
                f"shape {tuple(self.w_uk.shape)}"
            )
        Dh = heads_width // H
        Dr = 0 if self.w_kr is None else int(self.w_kr.shape[1])
        Dq = D if self.w_dq is None else int(self.w_dq.shape[1])
        want = {
            "w_uk": ((Dc, H * Dh), "(Dc, H Dh)"),
            "w_uv": ((Dc, H * Dh), "(Dc, H Dh)"),
            "w_uq": ((Dq, H * Dh), "(Dq, H Dh)"),
            "w_o": ((H * Dh, D), "(H Dh, D)"),
            "w_kr": ((D, Dr), "(D, Dr)"),
            "w_qr": ((Dq, H * Dr), "(Dq, H Dr)"),
            "w_dq": ((D, Dq), "(D, Dc')"),
        }
        for name, (shape, layout) in want.items():
            x = named.get(name)
            if x is not None and tuple(x.shape) != shape:
                raise ValueError(
                    f"{name} must have shape {layout} = {shape} (D={D}, Dc={Dc}, H={H}, "
                    f"Dh={Dh}, Dr={Dr}, Dq={Dq}); got {tuple(x.shape)}"
                )
        if Dr % 2:
            raise ValueError(
                f"w_kr must have an even width Dr: rotary positions turn pairs of coordinates; "
                f"got Dr={Dr}"
            )
        check_latent_widths(H, Dh, Dc, Dr, None if self.w_dq is None else Dq)

    def arrays(self) -> dict[str, Array]:
        """Every weight that is present, by name (``None`` ones left out).

        Shape:
            Each as in :class:`MLAParams`.

        Returns:
            ``{name: array}`` in the order of the fields.
        """
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "num_heads" and getattr(self, f.name) is not None
        }

    @property
    def d_model(self) -> int:
        """D, the model width."""
        return int(self.w_dkv.shape[0])

    @property
    def d_latent(self) -> int:
        """Dc, the width of the cached latent."""
        return int(self.w_dkv.shape[1])

    @property
    def d_head(self) -> int:
        """Dh, the width of each head's rebuilt key, value and query."""
        return int(self.w_uk.shape[1]) // self.num_heads

    @property
    def d_rope(self) -> int:
        """Dr, the width of the rotary key and of each head's rotary query (0 without)."""
        return 0 if self.w_kr is None else int(self.w_kr.shape[1])

    @property
    def d_query_latent(self) -> int | None:
        """Dc', the width of the query latent, or ``None`` without one."""
        return None if self.w_dq is None else int(self.w_dq.shape[1])

    @property
    def dtype(self) -> Any:
        """The dtype of the weights."""
        return self.w_dkv.dtype

    def cached_width(self) -> int:
        """Elements the layer caches per position and sequence: ``Dc + Dr``.

        Returns:
            ``d_latent + d_rope``.
        """
        return self.d_latent + self.d_rope

    def map(self, fn: Any) -> MLAParams:
        """Apply ``fn`` to every weight (e.g. a dtype cast); absent ones stay ``None``.

        Args:
            fn: applied to each weight; returns an array or tensor.

        Returns:
            New ``MLAParams`` of the results (checked as at construction).
        """
        return replace(self, **{name: fn(x) for name, x in self.arrays().items()})

    def to_numpy(self, dtype: Any = None) -> MLAParams:
        """A NumPy copy, cast to ``dtype`` if given.

        Args:
            dtype: NumPy float32 or float64, or ``None`` to keep each weight's dtype.

        Returns:
            ``MLAParams`` of NumPy arrays that share no memory with these.

        Raises:
            TypeError: if ``dtype`` is not ``None``, NumPy's float32 or float64.
        """
        return numpy_copy(self, dtype, (np.float32, np.float64))

    def to_torch(self, dtype: Any = None, device: Any = None) -> MLAParams:
        """A PyTorch copy, cast to ``dtype`` and moved to ``device`` if given.

        Args:
            dtype: a floating torch dtype, or ``None`` to keep each weight's.
            device: where to put the copy; ``None`` for the CPU (or the tensors' device).

        Returns:
            ``MLAParams`` of PyTorch tensors that share no memory with these.

        Raises:
            TypeError: if ``dtype`` is not ``None`` or a floating ``torch.dtype``, or
                ``device`` is not a device or a device name.
            ValueError: if ``device`` names no device available here.
        """
        return torch_copy(self, dtype, device)


def _shape(x: Any) -> Any:
    return None if x is None else tuple(x.shape)


def check_latent_widths(
    num_heads: int, d_head: int, d_latent: int, d_rope: int, d_query_latent: int | None
) -> None:
    """Check that no latent is wider than the heads it feeds.

    Args:
        num_heads: the number of heads, H.
        d_head: Dh.
        d_latent: Dc, at most ``2 H Dh`` (the keys and values it rebuilds).
        d_rope: Dr.
        d_query_latent: Dc', at most ``H (Dh + Dr)`` (every head's query); ``None`` for none.

    Raises:
        ValueError: if a latent is wider than that.
    """
    feeds = 2 * num_heads * d_head
    if d_latent > feeds:
        raise ValueError(
            f"d_latent must be at most 2 H Dh = {feeds}, the keys and values it rebuilds: a "
            "wider latent caches more than multi-head attention, and the up-projections "
            f"(rank at most {feeds}) lose its extra directions; got d_latent={d_latent} "
            f"(H={num_heads}, Dh={d_head})"
        )
    queries = num_heads * (d_head + d_rope)
    if d_query_latent is not None and d_query_latent > queries:
        raise ValueError(
            f"d_query_latent must be at most H (Dh + Dr) = {queries}, the queries it feeds; "
            f"got d_query_latent={d_query_latent} (H={num_heads}, Dh={d_head}, Dr={d_rope})"
        )


def init_mla_params(
    d_model: int,
    num_heads: int,
    d_latent: int,
    d_rope: int = 0,
    *,
    d_head: int | None = None,
    d_query_latent: int | None = None,
    seed: int = 0,
    dtype: Any = np.float64,
) -> MLAParams:
    """Random latent attention weights drawn with NumPy from one seed, for either backend.

    Each weight is drawn i.i.d. from ``N(0, 1/n)``, ``n`` its number of rows, so that each
    product keeps the scale of its input. Use ``.to_torch()`` for PyTorch.

    Args:
        d_model: the model width, D.
        num_heads: the number of heads, H.
        d_latent: Dc, the cached latent's width; at most ``2 H Dh``.
        d_rope: Dr, the rotary key's width: even, 0 for no decoupled rotary keys.
        d_head: Dh (``None``: ``D // H``, which H must then divide).
        d_query_latent: Dc', the query latent's width, or ``None`` for none; at most
            ``H (Dh + Dr)``.
        seed: seed of ``numpy.random.default_rng``, an int >= 0.
        dtype: NumPy float32 or float64.

    Returns:
        ``MLAParams`` holding NumPy arrays.

    Raises:
        ValueError: if a size is not positive (``d_rope``: negative or odd), H does not
            divide D when ``d_head`` is ``None``, or a latent is too wide (see
            :class:`MLAParams`).
        TypeError: if a size or ``seed`` is not an int, or ``dtype`` is not NumPy's float32
            or float64.
    """
    check_positive_sizes(d_model=d_model, num_heads=num_heads, d_latent=d_latent)
    check_at_least("d_rope", d_rope, 0)
    if d_head is None:
        if d_model % num_heads:
            raise ValueError(
                f"num_heads must divide d_model when d_head is None; got d_model={d_model}, "
                f"num_heads={num_heads} (or pass d_head)"
            )
        d_head = d_model // num_heads
    check_positive("d_head", d_head)
    if d_query_latent is not None:
        check_positive("d_query_latent", d_query_latent)
    if d_rope % 2:
        raise ValueError(
            f"d_rope must be even: rotary positions turn pairs of coordinates; got d_rope={d_rope}"
        )
    check_latent_widths(num_heads, d_head, d_latent, d_rope, d_query_latent)
    check_seed("seed", seed)
    dtype = numpy_float_dtype("dtype", dtype, (np.float32, np.float64))
    rng = np.random.default_rng(seed)
    D, H, Dh, Dc, Dr = d_model, num_heads, d_head, d_latent, d_rope
    Dq = D if d_query_latent is None else d_query_latent

    def draw(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(dtype)

    params = MLAParams(
        w_dkv=draw(D, Dc),
        w_uk=draw(Dc, H * Dh),
        w_uv=draw(Dc, H * Dh),
        w_uq=draw(Dq, H * Dh),
        w_o=draw(H * Dh, D),
        num_heads=H,
        w_kr=draw(D, Dr) if Dr else None,
        w_qr=draw(Dq, H * Dr) if Dr else None,
        w_dq=None if d_query_latent is None else draw(D, Dq),
    )
    return params
