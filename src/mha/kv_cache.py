"""A key/value cache for incremental decoding, in NumPy or PyTorch.

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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha import _validate


def _is_torch_dtype(dtype: Any) -> bool:
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


class KVCache:
    """Projected keys and values of the positions seen so far, for one attention layer.

    Args:
        batch_size: B.
        num_kv_heads: H_kv, the key/value heads (H for multi-head attention, 1 for
            multi-query attention).
        d_head: Dh.
        capacity: the most positions the cache can hold.
        dtype: ``np.float32``/``np.float64`` for NumPy buffers, or a floating
            ``torch.dtype`` for PyTorch buffers.
        device: where PyTorch buffers live (ignored for NumPy).

    Shape:
        :attr:`keys` and :attr:`values` ``(B, H_kv, S, Dh)``, ``S`` = :attr:`length`.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int, or ``dtype`` is not a floating dtype.
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
        for name, value in (
            ("batch_size", batch_size),
            ("num_kv_heads", num_kv_heads),
            ("d_head", d_head),
            ("capacity", capacity),
        ):
            _validate.check_int(name, value)
            if value <= 0:
                raise ValueError(f"{name} must be positive; got {name}={value}")
        shape = (batch_size, num_kv_heads, capacity, d_head)
        if _is_torch_dtype(dtype):
            import torch

            if not dtype.is_floating_point:
                raise TypeError(f"dtype must be a floating dtype; got dtype {dtype}")
            self._k = torch.empty(shape, dtype=dtype, device=device)
            self._v = torch.empty(shape, dtype=dtype, device=device)
        else:
            try:
                np_dtype = np.dtype(dtype)
            except TypeError as error:
                raise TypeError(f"dtype must be a floating dtype; got {dtype!r}") from error
            if np_dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
                raise TypeError(f"dtype must be float32 or float64; got dtype {np_dtype}")
            self._k = np.empty(shape, dtype=np_dtype)
            self._v = np.empty(shape, dtype=np_dtype)
        self._length = 0

    @property
    def batch_size(self) -> int:
        """B."""
        return int(self._k.shape[0])

    @property
    def num_kv_heads(self) -> int:
        """H_kv."""
        return int(self._k.shape[1])

    @property
    def capacity(self) -> int:
        """The most positions the cache can hold."""
        return int(self._k.shape[2])

    @property
    def d_head(self) -> int:
        """Dh."""
        return int(self._k.shape[3])

    @property
    def dtype(self) -> Any:
        """The dtype of the buffers."""
        return self._k.dtype

    @property
    def length(self) -> int:
        """S, the number of positions cached."""
        return self._length

    def __len__(self) -> int:
        return self._length

    @property
    def keys(self) -> Any:
        """The cached keys ``(B, H_kv, S, Dh)``: a view of the buffer, not a copy."""
        return self._k[:, :, : self._length]

    @property
    def values(self) -> Any:
        """The cached values ``(B, H_kv, S, Dh)``: a view of the buffer, not a copy."""
        return self._v[:, :, : self._length]

    @property
    def nbytes(self) -> int:
        """Bytes held by the two buffers (allocated at full capacity)."""
        return 2 * int(self._k.nbytes)

    def append(self, key: Any, value: Any) -> None:
        """Write the projected keys and values of ``n`` new positions after the cached ones.

        Args:
            key: new keys, of the cache's library and dtype.
            value: new values, the same shape.

        Shape:
            key and value ``(B, H_kv, n, Dh)``.

        Raises:
            ValueError: if a shape does not match the cache, or the cache would exceed its
                capacity.
            TypeError: if ``key``/``value`` is not an array of the cache's library and dtype.
        """
        for name, x in (("key", key), ("value", value)):
            if type(x) is not type(self._k):
                raise TypeError(
                    f"{name} must be a {type(self._k).__module__}.{type(self._k).__name__} "
                    f"like the cache; got {type(x).__name__}"
                )
            if x.dtype != self._k.dtype:
                raise TypeError(
                    f"{name} must have the cache's dtype {self._k.dtype}; got dtype {x.dtype}"
                )
            if x.ndim != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (
                self.batch_size,
                self.num_kv_heads,
                self.d_head,
            ):
                raise ValueError(
                    f"{name} must have shape (B, H_kv, n, Dh) = ({self.batch_size}, "
                    f"{self.num_kv_heads}, n, {self.d_head}); got {tuple(x.shape)}"
                )
        if key.shape[2] != value.shape[2]:
            raise ValueError(
                "key and value must hold the same number of positions; got "
                f"{key.shape[2]} and {value.shape[2]}"
            )
        n = int(key.shape[2])
        if self._length + n > self.capacity:
            raise ValueError(
                f"the cache holds at most capacity={self.capacity} positions; it holds "
                f"{self._length} and got {n} more"
            )
        end = self._length + n
        self._k[:, :, self._length : end] = key
        self._v[:, :, self._length : end] = value
        self._length = end

    def reset(self) -> None:
        """Forget every cached position (the buffers are kept for reuse)."""
        self._length = 0

    def truncate(self, length: int) -> None:
        """Keep only the first ``length`` positions, e.g. to drop rejected draft tokens.

        Args:
            length: positions to keep, at most :attr:`length`.

        Raises:
            ValueError: if ``length`` is negative or more than the cache holds.
            TypeError: if ``length`` is not an int.
        """
        _validate.check_int("length", length)
        if not 0 <= length <= self._length:
            raise ValueError(
                f"length must be in [0, {self._length}], the positions cached; got length={length}"
            )
        self._length = length
