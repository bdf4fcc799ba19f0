"""Two shortcuts of the PyTorch backend's explicit attention on the CPU, and their switch.

When autograd does not record, :func:`mha.backends.torch_backend.attend` computes the
weights on the CPU with :func:`attend` here, which takes two shortcuts. Each rests on
behaviour that NumPy or PyTorch does not document, so :func:`use` switches them off, and the
plain path that replaces them (scores, then an out-of-place softmax, the path autograd
records) uses documented operations only. The two paths agree to rounding, which the tests
check; :mod:`mha.cost.peak_memory` and the book measure the memory of both.

- The score buffer: the ``(..., L, S)`` scores are written into a buffer that NumPy
  allocates. NumPy asks the kernel for huge pages for large arrays (an allocator and OS
  behaviour), so the first writes fault once per 2 MiB rather than once per 4 KiB page,
  which for a 32 MiB score tensor saves milliseconds. The matrix products get contiguous
  operands (heads split from a projection are strided views), which may take another BLAS
  kernel and so round differently.
- The softmax in place: the softmax is written over the scores
  (``torch.softmax(x, dim=-1, out=x)``; PyTorch's CPU kernel reads each row before writing
  it, which PyTorch does not document), so one ``(..., L, S)`` tensor is held where the plain
  path holds two, the scores and the weights. The values are those of the plain softmax
  exactly: the same kernel on the same scores.

The shortcuts need tensors with memory of their own on the CPU: they are not taken while a
graph is traced (``torch.compiler.is_compiling``) or for a tensor that ``torch.func`` wraps
(it has no storage).
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from mha.core._tools import switched

_SHORTCUTS = contextvars.ContextVar("mha_cpu_shortcuts", default=True)
_NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}


@contextmanager
def use(enabled: bool) -> Iterator[None]:
    """Switch the CPU shortcuts of explicit attention on or off inside the block (on by default).

    With them off, :func:`mha.backends.torch_backend.attend` takes the plain path, in
    documented operations only, whether autograd records or not (see the module docstring).

    Args:
        enabled: ``False`` for the plain path inside the block, ``True`` for the shortcuts.

    Yields:
        Nothing; the setting applies to this thread (and task) until the block ends, and is
        restored when it ends, by an exception too.

    Raises:
        TypeError: if ``enabled`` is not a bool.
    """
    with switched(_SHORTCUTS, enabled):
        yield


def applies(*tensors: torch.Tensor | None) -> bool:
    """True when :func:`attend` may run on ``tensors``: the shortcuts are on, no graph is being
    traced, and every tensor lives on the CPU, in memory of its own, unrecorded by autograd.

    Args:
        *tensors: the queries, keys, values and mask (``None`` is skipped).

    Shape:
        Any; only where the tensors live is read.

    Returns:
        Whether the shortcuts apply.
    """
    if not _SHORTCUTS.get() or torch.compiler.is_compiling():
        return False
    recording = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if t.device.type != "cpu" or (recording and t.requires_grad) or not _has_storage(t):
            return False
    return True


def _has_storage(t: torch.Tensor) -> bool:
    """False for a tensor that ``torch.func`` wraps (``vmap``, ``grad``): it has no memory."""
    try:
        t.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return False
    return True


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Explicit attention without autograd, in one ``(..., L, S)`` buffer (the weights).

    The arithmetic of :func:`mha.backends.torch_backend.attend`'s plain path, with the two
    shortcuts of the module docstring; only where :func:`applies` says so.

    Args:
        q: the queries, ``(..., L, Dh)``.
        k: the keys, ``(..., S, Dh)``.
        v: the values, ``(..., S, Dv)``.
        mask: ``None`` or a boolean mask (True = may attend) broadcasting to ``(..., L, S)``.

    Shape:
        As :func:`mha.backends.torch_backend.attend`.

    Returns:
        The output ``(..., L, Dv)`` and the weights, a tensor allocated by NumPy when it can.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    q = torch.mul(q, scale, out=torch.empty(q.shape, dtype=q.dtype))  # contiguous
    shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    if mask is not None:  # a mask may add batch dimensions, as masked_fill does on the plain path
        shape = torch.broadcast_shapes(shape, mask.shape)
        q = q.expand(*shape[:-2], *q.shape[-2:])  # (..., L, Dh), a view
    scores = torch.matmul(q, k.contiguous().transpose(-1, -2), out=_empty(shape, q.dtype))
    weights = softmax_in_place(scores, mask)  # the same tensor as scores, holding the weights
    return weights @ v.contiguous(), weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor, allocated by NumPy when NumPy has its dtype."""
    if dtype in _NUMPY_FLOATS:
        return torch.from_numpy(np.empty(shape, dtype=_NUMPY_FLOATS[dtype]))
    return torch.empty(shape, dtype=dtype)


def softmax_in_place(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The softmax of :func:`mha.backends.torch_backend.softmax` computed in the scores' memory.

    The same operations in the same order, so the result equals the plain softmax's exactly.
    Low-precision scores are normalised in a float32 copy that is then rounded back into
    ``scores``, as the plain softmax rounds its float32 result.

    Args:
        scores: a tensor of scores, which receives the weights.
        mask: ``None`` or a boolean tensor (True = may attend) that broadcasts to ``scores``.

    Shape:
        ``(..., L, S)`` in and out.

    Returns:
        ``scores`` itself.
    """
    low = scores.dtype == torch.bfloat16  # the one low-precision dtype of torch_checks.FLOATS
    work = scores.float() if low else scores  # (..., L, S)
    if mask is not None:
        any_allowed = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
        work.masked_fill_(~mask, float("-inf"))
        work.masked_fill_(~any_allowed, 0.0)  # fully masked rows: finite, then zeroed
    torch.softmax(work, dim=-1, out=work)  # row by row, each row read before it is written
    if mask is not None:
        work.mul_(any_allowed)
    return scores.copy_(work) if low else work
