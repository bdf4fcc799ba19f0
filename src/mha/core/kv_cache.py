"""Caches for incremental decoding, in NumPy or PyTorch: keys and values, or latents.

When a causal model generates a sequence one token at a time, the keys and values of the
positions already seen do not change: each step needs only the new token's projections.
:class:`KVCache` keeps the *projected* keys and values of a layer's key/value heads,
``K_g = Y W^K_g`` and ``V_g = Y W^V_g`` (``g = 1, ..., H_kv``), so that a step projects one
token instead of the whole prefix, and attends from it to everything cached.

The buffers are allocated once, at their full ``capacity``; appending writes the new
positions into the next free slots and copies nothing else, so an append moves
``B * H_kv * n * Dh`` elements of each tensor whatever the length already cached. The
cached part is returned as views (:attr:`KVCache.keys`, :attr:`KVCache.values`), not copies.

The library of the buffers follows ``dtype``: a NumPy dtype gives NumPy arrays, a
``torch.dtype`` gives tensors (on ``device``).

**What is checked.** Sizes are positive ints; ``dtype`` is one a layer computes in
(``torch.float16`` is refused); appended keys and values are arrays of the cache's library,
dtype and device, of shape ``(B, H_kv, n, Dh)``, within the capacity, finite (when measured),
and a given bound ``max_abs`` is a finite number ``>= 0``. Every check comes before any change,
and a layer call with a cache writes its new positions only into free slots until it has
succeeded (:meth:`KVCache.appending`): a refused call, the layer's included, leaves the cache's
length, contents and :attr:`KVCache.max_abs` as they were. While an ``appending`` block is open
the cache refuses every other change (its commit would overwrite them). A call that appends to
several caches in turn (a model's layers, one cache each) is atomic inside :func:`atomic`: when
a later layer refuses, the earlier layers' appends are undone.

:class:`LatentCache` is the cache of multi-head latent attention (:mod:`mha.backends.latent`):
per position one latent of width ``Dc``, from which every head's key and value is rebuilt,
and one rotary key of width ``Dr`` shared by every head, ``Dc + Dr`` elements in all. It
allocates, checks, refuses and undoes exactly as :class:`KVCache` does (both are built on one
private base), and :func:`atomic` takes both.

**Autograd.** Gradients flow through cached steps and equal those of the full causal forward:
while autograd records, an append writes into a new buffer rather than over the one earlier
steps saved for their backward pass (a copy of the buffer per recorded step).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from mha.core._checks import arguments, numpy_arrays
from mha.core._checks.numpy_arrays import numpy_float_dtype

TORCH_FLOATS = ("float64", "float32", "bfloat16")
"""The ``torch`` dtypes a cache may have: those a layer computes in (``torch_checks.FLOATS``)."""


def _is_torch_dtype(dtype: Any) -> bool:
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def _magnitude(x: Any) -> float:
    """The largest ``|x|`` (``inf`` for NaN or infinity, 0 for no values, as on ``meta``)."""
    size = x.numel() if hasattr(x, "numel") else x.size
    if size == 0 or getattr(x, "is_meta", False):
        return 0.0
    if hasattr(x, "detach"):
        x = x.detach()
    return arguments.extremes_max_abs(x.min(), x.max())


class _PairCache:
    """Two buffers whose positions grow together, allocated once at full capacity.

    What :class:`KVCache` and :class:`LatentCache` share: allocation, appends that check
    everything first, the :meth:`appending` block a layer uses, truncation and reset, and
    :func:`atomic`'s undo. A subclass sets the axis that counts positions (``_axis``), the
    names of the two arrays an append takes (``_names``) and the layouts its messages quote
    (``_layouts``), and allocates with :meth:`_allocate`.
    """

    _axis = 2
    _names = ("key", "value")
    _layouts = ("(B, H_kv, n, Dh)", "(B, H_kv, n, Dh)")
    _k: Any  # the first buffer (keys, or latents): a NumPy array or a torch tensor
    _v: Any  # the second (values, or rotary keys)

    def _allocate(self, shapes: tuple[tuple[int, ...], ...], dtype: Any, device: Any) -> None:
        """Allocate the two buffers (``dtype``'s library, on ``device``); the cache is empty."""
        if dtype is None:
            names = ", ".join(f"torch.{name}" for name in TORCH_FLOATS)
            raise TypeError(
                f"dtype must be np.float32, np.float64 or a torch dtype ({names}); got None"
            )
        if _is_torch_dtype(dtype):
            import torch

            allowed = tuple(getattr(torch, name) for name in TORCH_FLOATS)
            if dtype not in allowed:
                names = ", ".join(str(d) for d in allowed)
                raise TypeError(
                    f"dtype must be one of the dtypes a layer computes in ({names}); got "
                    f"dtype {dtype}"
                )
            device = arguments.check_device("device", device)
            self._k, self._v = (torch.empty(s, dtype=dtype, device=device) for s in shapes)
        else:
            if device is not None and str(device) != "cpu":
                raise ValueError(
                    "device must be None or 'cpu' for NumPy buffers (pass a torch dtype for "
                    f"PyTorch buffers elsewhere); got device={device!r} with dtype {dtype!r}"
                )
            np_dtype = numpy_float_dtype("dtype", dtype, (np.float32, np.float64))
            self._k, self._v = (np.empty(s, dtype=np_dtype) for s in shapes)
        self._length = 0
        self._max_abs = 0.0
        self._open = False  # an appending block is open: no other change until it ends
        self._floor: int | None = None  # the length to restore to, inside an atomic block

    def _positions(self, buffer: Any, start: int = 0, stop: int | None = None) -> tuple:
        """The index of positions ``start, ..., stop - 1`` of a buffer (stop: the length)."""
        stop = self._length if stop is None else stop
        return (slice(None),) * self._axis + (slice(start, stop),)

    def _sizes(self) -> tuple[tuple[int | None, ...], tuple[int | None, ...]]:
        """Each buffer's shape with ``None`` for the positions: what a block must match."""
        first, second = (
            tuple(None if i == self._axis else int(n) for i, n in enumerate(b.shape))
            for b in (self._k, self._v)
        )
        return first, second

    @property
    def capacity(self) -> int:
        """The most positions it can hold."""
        return int(self._k.shape[self._axis])

    @property
    def dtype(self) -> Any:
        """The dtype of the buffers."""
        return self._k.dtype

    @property
    def device(self) -> Any:
        """Where the buffers live: a ``torch.device``, or ``"cpu"`` for NumPy buffers."""
        return getattr(self._k, "device", "cpu")

    @property
    def length(self) -> int:
        """S, the number of positions cached."""
        return self._length

    def __len__(self) -> int:
        return self._length

    @property
    def max_abs(self) -> float:
        """The largest ``|entry|`` appended since the cache was made or reset: a bound on
        every cached entry, so that a layer can tell that attending to them cannot
        overflow without reading them again."""
        return self._max_abs

    @property
    def nbytes(self) -> int:
        """Bytes held by the two buffers (allocated at full capacity)."""
        return int(self._k.nbytes) + int(self._v.nbytes)

    def _append(self, first: Any, second: Any, max_abs: float | None) -> None:
        """Write ``n`` new positions of both buffers after the cached ones (checked first)."""
        self._commit(*self._stage(first, second, max_abs), first, second)

    def _extend(
        self, first: Any, second: Any, max_abs: float | None
    ) -> tuple[Any, Any]:  # fmt: skip
        """Append ``n`` new positions, then return every cached position of both buffers."""
        self._append(first, second, max_abs)
        k, v = self._k, self._v  # the buffers, new positions included
        return k[self._positions(k)], v[self._positions(v)]

    @contextmanager
    def _appending(
        self, first: Any, second: Any, max_abs: float | None
    ) -> Iterator[tuple[Any, Any]]:
        """Yield the cached positions of both buffers followed by new ones; append these when
        the block ends without an exception (see :meth:`KVCache.appending`)."""
        k, v, end, max_abs = self._stage(first, second, max_abs)
        self._open = True
        try:
            yield k[self._positions(k, 0, end)], v[self._positions(v, 0, end)]
        finally:
            self._open = False
        self._commit(k, v, end, max_abs, first, second)

    def _check_closed(self, what: str) -> None:
        """Refuse a change while an :meth:`appending` block of this cache is open."""
        if self._open:
            raise ValueError(
                f"cannot {what} the cache inside an open appending block of the same cache: "
                "the block's commit would overwrite it (end the block first)"
            )

    def _stage(
        self, first: Any, second: Any, max_abs: Any
    ) -> tuple[Any, Any, int, float | None]:  # fmt: skip
        """Check everything, then write the new positions into free slots past the length
        (of a copy of the buffers while autograd records); the cache itself is unchanged.

        Returns:
            The buffers holding them, the length after them, and the checked ``max_abs``.
        """
        self._check_closed("append to")
        n = self._check_block(first, second)
        if max_abs is not None:
            max_abs = arguments.check_magnitude("max_abs", max_abs)
        end = self._length + n
        k, v = self._k, self._v
        if self._copy_on_write(first, second):
            k, v = k.clone(), v.clone()
        k[self._positions(k, self._length, end)] = first
        v[self._positions(v, self._length, end)] = second
        return k, v, end, max_abs

    def _commit(
        self, k: Any, v: Any, end: int, max_abs: float | None, first: Any, second: Any
    ) -> None:
        """Make the staged positions part of the cache (measuring them if ``max_abs`` is None)."""
        if max_abs is None:
            max_abs = 0.0
            for name, x in zip(self._names, (first, second), strict=True):
                magnitude = _magnitude(x)
                if not math.isfinite(magnitude):
                    raise ValueError(f"{name} must be finite; got NaN or infinite values")
                max_abs = max(max_abs, magnitude)
        self._k, self._v = k, v
        self._length = end
        self._max_abs = max(self._max_abs, max_abs)

    def _check_block(self, first: Any, second: Any) -> int:
        """Check the two arrays of new positions; return ``n``, their number."""
        arrays = (first, second)
        for name, x, layout, sizes in zip(
            self._names, arrays, self._layouts, self._sizes(), strict=True
        ):
            self._check_array(name, x)
            if x.ndim != len(sizes) or any(
                want is not None and got != want for got, want in zip(x.shape, sizes, strict=True)
            ):
                want = ", ".join("n" if s is None else str(s) for s in sizes)
                raise ValueError(
                    f"{name} must have shape {layout} = ({want}); got {tuple(x.shape)}"
                )
        n_first, n_second = (int(x.shape[self._axis]) for x in arrays)
        if n_first != n_second:
            one, two = self._names
            raise ValueError(
                f"{one} and {two} must hold the same number of positions; got "
                f"{n_first} and {n_second}"
            )
        if self._length + n_first > self.capacity:
            raise ValueError(
                f"the cache holds at most capacity={self.capacity} positions; it holds "
                f"{self._length} and got {n_first} more"
            )
        return n_first

    def _check_array(self, name: str, x: Any) -> None:
        """Check that ``x`` is an array of the cache's library, dtype and device."""
        kind = type(self._k)
        if not isinstance(x, kind):
            raise TypeError(
                f"{name} must be a {kind.__module__}.{kind.__name__} like the cache; got "
                f"{type(x).__name__}"
            )
        if isinstance(self._k, np.ndarray):
            numpy_arrays.check_kind(name, x)
        else:
            arguments.check_dense(name, x)
        if x.dtype != self._k.dtype:
            raise TypeError(
                f"{name} must have the cache's dtype {self._k.dtype}; got dtype {x.dtype}"
            )
        if not isinstance(self._k, np.ndarray) and x.device != self._k.device:
            raise TypeError(
                f"{name} must be on the cache's device ({self._k.device}); got {name} on {x.device}"
            )

    def _copy_on_write(self, first: Any, second: Any) -> bool:
        """Whether to write new positions into a copy: while autograd records a step.

        A recorded step saves views of the buffer for its backward pass, so writing over
        the buffer would corrupt them (PyTorch refuses that backward).
        """
        if isinstance(self._k, np.ndarray):
            return False
        import torch

        recording = torch.is_grad_enabled() and (first.requires_grad or second.requires_grad)
        return bool(self._k.requires_grad or recording)

    def _reset(self) -> None:
        """:meth:`KVCache.reset` for both cache kinds (documented there)."""
        self._check_closed("reset")
        if self._floor:
            raise ValueError(
                f"cannot reset the cache inside an atomic block: it held {self._floor} "
                "positions when the block began, which an undo must restore"
            )
        if not isinstance(self._k, np.ndarray) and self._k.requires_grad:
            import torch

            self._k, self._v = (torch.empty_like(b) for b in (self._k, self._v))  # no graph
        self._length = 0
        self._max_abs = 0.0

    def _truncate(self, length: int) -> None:
        """:meth:`KVCache.truncate` for both cache kinds (documented there)."""
        arguments.check_int("length", length)
        self._check_closed("truncate")
        low = self._floor or 0  # inside an atomic block: what an undo must restore stays
        if not low <= length <= self._length:
            where = " (an atomic block holds the first positions)" if low else ""
            raise ValueError(
                f"length must be in [{low}, {self._length}], the positions cached{where}; got "
                f"length={length}"
            )
        self._length = int(length)


class KVCache(_PairCache):
    """Projected keys and values of the positions seen so far, for one attention layer.

    Args:
        batch_size: the batch size, B.
        num_kv_heads: H_kv, the key/value heads (H for multi-head attention, 1 for
            multi-query attention).
        d_head: Dh.
        capacity: the most positions the cache can hold.
        dtype: ``np.float32``/``np.float64`` for NumPy buffers, or ``torch.float64``,
            ``torch.float32`` or ``torch.bfloat16`` for PyTorch buffers: the dtypes a layer
            computes in (``torch.float16`` is refused here, since no layer could use the cache).
        device: where PyTorch buffers live (``None`` for the default; ``"meta"`` gives a
            cache for shape inference, which takes only ``meta`` tensors); NumPy buffers
            live on the CPU (``None`` or ``"cpu"``).

    Shape:
        :attr:`keys` and :attr:`values` ``(B, H_kv, S, Dh)``, ``S`` = :attr:`length`.

    Raises:
        ValueError: if a size is not positive, the buffers would pass what an array can
            hold, or ``device`` names no device available here or one other than the CPU
            for NumPy buffers.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool),
            ``dtype`` is ``None`` or not one of the five dtypes above, or ``device`` is not
            a device or a name.

    Every method checks its arguments before it changes anything, so a refused call leaves
    the cache as it was; so does a layer call with a cache that raises
    (:meth:`appending`).
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        d_head: int,
        capacity: int,
        *,
        dtype: Any = np.float64,
        device: Any = None,
    ) -> None:
        sizes = arguments.sizes(
            batch_size=batch_size, num_kv_heads=num_kv_heads, d_head=d_head, capacity=capacity
        )
        shape = (sizes["batch_size"], sizes["num_kv_heads"], sizes["capacity"], sizes["d_head"])
        arguments.check_elements("capacity", 2 * math.prod(shape), 8)
        self._allocate((shape, shape), dtype, device)

    # The buffers' shape (B, H_kv, capacity, Dh), read back as the cache's sizes.
    batch_size = property(lambda self: int(self._k.shape[0]), doc="B.")
    num_kv_heads = property(lambda self: int(self._k.shape[1]), doc="H_kv.")
    d_head = property(lambda self: int(self._k.shape[3]), doc="Dh.")

    @property
    def keys(self) -> Any:
        """The cached keys ``(B, H_kv, S, Dh)``: a view of the buffer, not a copy (while
        autograd records, see :meth:`append`, each append makes a new buffer)."""
        return self._k[self._positions(self._k)]

    @property
    def values(self) -> Any:
        """The cached values ``(B, H_kv, S, Dh)``: a view of the buffer, not a copy (while
        autograd records, see :meth:`append`, each append makes a new buffer)."""
        return self._v[self._positions(self._v)]

    def reset(self) -> None:
        """Forget every cached position (the buffers are kept for reuse; buffers that a
        recorded step saved for its backward pass are replaced, and left to that step).

        Raises:
            ValueError: inside an open :meth:`appending` block of this cache, or inside an
                :func:`atomic` block while the cache held positions when the block began
                (it would have to restore them).
        """
        self._reset()

    def truncate(self, length: int) -> None:
        """Keep only the first ``length`` positions, e.g. to drop rejected draft tokens.

        :attr:`max_abs` stays a bound on what is left (it is not lowered).

        Args:
            length: positions to keep, at most :attr:`length`.

        Raises:
            ValueError: if ``length`` is negative or more than the cache holds, inside an open
                :meth:`appending` block of this cache, or inside an :func:`atomic` block below
                the length the cache had when it began.
            TypeError: if ``length`` is not an int (``None`` and bools included).
        """
        self._truncate(length)

    def append(self, key: Any, value: Any, *, max_abs: float | None = None) -> None:
        """Write the projected keys and values of ``n`` new positions after the cached ones.

        Everything is checked before the cache changes: a refused call leaves its length,
        contents and :attr:`max_abs` as they were.

        **Autograd.** With PyTorch buffers, when autograd records ``key`` or ``value`` (or
        recorded an earlier append), the new positions are written into a new buffer instead
        of over the old one, which earlier steps may have saved for their backward pass:
        gradients then flow through every cached step, and equal those of the full causal
        forward. This costs a copy of the buffer per append, only while recording; decoding
        without autograd writes in place.

        Args:
            key: new keys, an array of the cache's library, dtype and device (a NumPy
                array, not a masked array or matrix; a dense tensor).
            value: new values, the same shape.
            max_abs: a bound on every ``|key|`` and ``|value|`` entry already known to the
                caller (a layer knows one from its inputs' magnitudes), a finite number
                ``>= 0``; the entries are then not read, and the caller vouches for them.
                ``None`` measures them, and refuses NaN and infinity. It keeps
                :attr:`max_abs` a bound without another pass over the data.

        Shape:
            key and value ``(B, H_kv, n, Dh)``.

        Raises:
            ValueError: if a shape does not match the cache, ``key`` and ``value`` hold
                different numbers of positions, the cache would exceed its capacity,
                ``max_abs`` is negative, NaN or infinite, (``max_abs=None``) ``key`` or
                ``value`` holds NaN or infinity, or an :meth:`appending` block of this cache
                is open.
            TypeError: if ``key``/``value`` is not an array of the cache's library (``None``
                included), dtype and device, or ``max_abs`` is not a real number.
        """
        self._append(key, value, max_abs)

    def extend(self, key: Any, value: Any, *, max_abs: float | None = None) -> tuple[Any, Any]:
        """Append ``n`` new positions (:meth:`append`), then return every cached position.

        The step of decoding a form of attention takes: the keys and values it attends to
        are the cached ones followed by the new ones.

        Args:
            key: new keys, as in :meth:`append`.
            value: new values, the same shape.
            max_abs: as in :meth:`append`.

        Shape:
            key and value ``(B, H_kv, n, Dh)``; returns :attr:`keys` and :attr:`values`,
            ``(B, H_kv, S, Dh)`` with ``S`` = :attr:`length` after the append.

        Returns:
            ``(keys, values)``.

        Raises:
            ValueError, TypeError: as :meth:`append`.
        """
        return self._extend(key, value, max_abs)

    @contextmanager
    def appending(
        self, key: Any, value: Any, *, max_abs: float | None = None
    ) -> Iterator[tuple[Any, Any]]:
        """Attend to the cached positions and ``n`` new ones; keep the new ones only if that
        succeeds.

        The context manager a layer uses: it yields the cached keys and values followed by
        ``key`` and ``value``, and appends these when the block ends without an exception.
        When the block raises (a layer refusing an overflow, say), the cache keeps its
        length, contents and :attr:`max_abs`: the new positions were written only into free
        slots past :attr:`length`, which nothing reads. :meth:`append` is this with an empty
        block. Inside the block the cache can be read but not changed: an append, truncate or
        reset of it (a layer call with it included) raises, since the block's commit would
        overwrite it.

        Args:
            key: new keys, as in :meth:`append`.
            value: new values, the same shape.
            max_abs: as in :meth:`append` (``None``: measured when the block ends).

        Shape:
            key and value ``(B, H_kv, n, Dh)``; yields keys and values ``(B, H_kv, S + n, Dh)``,
            ``S`` = :attr:`length`.

        Yields:
            ``(keys, values)``: every position the cache will hold once the block succeeds.

        Raises:
            ValueError, TypeError: as :meth:`append`, before the block runs (except the
                measured ``max_abs``, checked after it); and whatever the block raises.
        """
        with self._appending(key, value, max_abs) as held:
            yield held


class LatentCache(_PairCache):
    """The latents and the rotary keys of the positions seen so far, for one latent layer.

    Multi-head latent attention (:mod:`mha.backends.latent`) caches, per position, one
    latent vector of width ``Dc`` that every head's key and value is rebuilt from, and one
    rotary key of width ``Dr`` shared by every head (after its rotation). So a position
    costs ``Dc + Dr`` elements per layer, against ``2 H_kv Dh`` for a :class:`KVCache`.
    It refuses and undoes exactly as a :class:`KVCache` does: every check comes before any
    change, a layer keeps its new positions only when the call succeeds
    (:meth:`appending`), and :func:`atomic` undoes the appends of a block of layers.

    Args:
        batch_size: the batch size, B.
        d_latent: Dc, the latent's width.
        d_rope: Dr, the rotary key's width; 0 for a layer without decoupled rotary keys
            (the buffer then holds no element).
        capacity: the most positions the cache can hold.
        dtype: as for :class:`KVCache`.
        device: as for :class:`KVCache`.

    Shape:
        :attr:`latents` ``(B, S, Dc)`` and :attr:`rotary_keys` ``(B, S, Dr)``, ``S`` =
        :attr:`length`.

    Raises:
        ValueError: if ``batch_size``, ``d_latent`` or ``capacity`` is not positive,
            ``d_rope`` is negative, the buffers would pass what an array can hold, or
            ``device`` is refused as by :class:`KVCache`.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool), or
            ``dtype`` or ``device`` is refused as by :class:`KVCache`.
    """

    _axis = 1
    _names = ("latent", "rotary_key")
    _layouts = ("(B, n, Dc)", "(B, n, Dr)")

    def __init__(
        self,
        batch_size: int,
        d_latent: int,
        d_rope: int,
        capacity: int,
        *,
        dtype: Any = np.float64,
        device: Any = None,
    ) -> None:
        B, Dc, S = arguments.sizes(
            batch_size=batch_size, d_latent=d_latent, capacity=capacity
        ).values()
        Dr = arguments.size("d_rope", d_rope, low=0)
        arguments.check_elements("capacity", B * S * (Dc + Dr), 8)
        self._allocate(((B, S, Dc), (B, S, Dr)), dtype, device)

    # The buffers' shapes (B, capacity, Dc) and (B, capacity, Dr), read back as sizes.
    batch_size = property(lambda self: int(self._k.shape[0]), doc="B.")
    d_latent = property(lambda self: int(self._k.shape[2]), doc="Dc, the latent's width.")
    d_rope = property(lambda self: int(self._v.shape[2]), doc="Dr, the rotary key's width.")

    @property
    def latents(self) -> Any:
        """The cached latents ``(B, S, Dc)``: a view of the buffer, not a copy."""
        return self._k[self._positions(self._k)]

    @property
    def rotary_keys(self) -> Any:
        """The cached rotary keys ``(B, S, Dr)``, already rotated: a view, not a copy."""
        return self._v[self._positions(self._v)]

    def reset(self) -> None:
        """Forget every cached position, as :meth:`KVCache.reset` does.

        Raises:
            ValueError: as :meth:`KVCache.reset`.
        """
        self._reset()

    def truncate(self, length: int) -> None:
        """Keep only the first ``length`` positions, as :meth:`KVCache.truncate` does.

        Args:
            length: positions to keep, at most :attr:`length`.

        Raises:
            ValueError, TypeError: as :meth:`KVCache.truncate`.
        """
        self._truncate(length)

    def append(self, latent: Any, rotary_key: Any, *, max_abs: float | None = None) -> None:
        """Write the latents and rotary keys of ``n`` new positions after the cached ones.

        Everything is checked before the cache changes, as in :meth:`KVCache.append`
        (autograd included).

        Args:
            latent: new latents, an array of the cache's library, dtype and device.
            rotary_key: their rotary keys, already rotated to their positions.
            max_abs: a bound on every entry already known to the caller, or ``None`` to
                measure them (as in :meth:`KVCache.append`).

        Shape:
            latent ``(B, n, Dc)``, rotary_key ``(B, n, Dr)``.

        Raises:
            ValueError: if a shape does not match the cache, the two hold different numbers
                of positions, the cache would exceed its capacity, ``max_abs`` is negative,
                NaN or infinite, (``max_abs=None``) an entry is NaN or infinite, or an
                :meth:`appending` block of this cache is open.
            TypeError: if an array is not of the cache's library (``None`` included), dtype
                and device, or ``max_abs`` is not a real number.
        """
        self._append(latent, rotary_key, max_abs)

    def extend(
        self, latent: Any, rotary_key: Any, *, max_abs: float | None = None
    ) -> tuple[Any, Any]:
        """Append ``n`` new positions (:meth:`append`), then return every cached position.

        Args:
            latent: new latents, as in :meth:`append`.
            rotary_key: their rotary keys.
            max_abs: as in :meth:`append`.

        Shape:
            latent ``(B, n, Dc)``, rotary_key ``(B, n, Dr)``; returns :attr:`latents`
            ``(B, S, Dc)`` and :attr:`rotary_keys` ``(B, S, Dr)`` after the append.

        Returns:
            ``(latents, rotary_keys)``.

        Raises:
            ValueError, TypeError: as :meth:`append`.
        """
        return self._extend(latent, rotary_key, max_abs)

    @contextmanager
    def appending(
        self, latent: Any, rotary_key: Any, *, max_abs: float | None = None
    ) -> Iterator[tuple[Any, Any]]:
        """Attend to the cached positions and ``n`` new ones; keep the new ones only if that
        succeeds (as :meth:`KVCache.appending`).

        Args:
            latent: new latents, as in :meth:`append`.
            rotary_key: their rotary keys.
            max_abs: as in :meth:`append` (``None``: measured when the block ends).

        Shape:
            latent ``(B, n, Dc)``, rotary_key ``(B, n, Dr)``; yields ``(B, S + n, Dc)`` and
            ``(B, S + n, Dr)``, ``S`` = :attr:`length`.

        Yields:
            ``(latents, rotary_keys)``: every position the cache will hold once the block
            succeeds.

        Raises:
            ValueError, TypeError: as :meth:`append`, before the block runs (except the
                measured ``max_abs``, checked after it); and whatever the block raises.
        """
        with self._appending(latent, rotary_key, max_abs) as held:
            yield held


@contextmanager
def atomic(caches: Sequence[KVCache | LatentCache]) -> Iterator[None]:
    """Keep what a block appends to several caches only if the whole block succeeds.

    A model with one cache per layer appends to each in turn, one layer call after another.
    Each call is atomic by itself (:meth:`KVCache.appending`), but when a later layer refuses
    its call (a cache that does not fit it, an overflow), the earlier layers' appends would
    stay, and the caches would no longer agree on their length. Inside this block they are
    kept only when it ends without an exception; otherwise every cache gets back its length,
    contents and :attr:`KVCache.max_abs`, exactly: appends write only past the length (or, while
    autograd records, into a new buffer), so nothing the caches held was overwritten. To keep
    it so, a cache inside the block cannot be truncated below, or reset from, the length it
    had when the block began. Blocks may nest.

    Args:
        caches: the caches the block appends to (a list or tuple of :class:`KVCache` or
            :class:`LatentCache`, mixed as a model's layers need).

    Yields:
        Nothing; on an exception the caches are restored and the exception propagates.

    Raises:
        TypeError: if ``caches`` is not a list or tuple of :class:`KVCache` or
            :class:`LatentCache`.
        ValueError: if a cache is inside an open :meth:`KVCache.appending` block, or one
            cache appears twice (``[cache] * n``: its undo would restore it twice).
    """
    if not isinstance(caches, list | tuple) or not all(isinstance(c, _PairCache) for c in caches):
        got = (
            type(caches).__name__
            if not isinstance(caches, list | tuple)
            else ", ".join(type(c).__name__ for c in caches)
        )
        raise TypeError(f"caches must be a list or tuple of KVCache or LatentCache; got {got}")
    arguments.distinct_objects("caches", caches)
    for cache in caches:
        cache._check_closed("begin an atomic block of")
    states = [(c, c._k, c._v, c._length, c._max_abs, c._floor) for c in caches]
    for cache in caches:
        cache._floor = cache._length
    try:
        yield
    except BaseException:
        for cache, k, v, length, max_abs, _ in reversed(states):
            cache._k, cache._v, cache._length, cache._max_abs = k, v, length, max_abs
        raise
    finally:
        for cache, *_, floor in reversed(states):
            cache._floor = floor
