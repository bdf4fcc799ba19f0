"""Multi-head attention in PyTorch, with the names and arguments of :mod:`mha.backends.np_backend`.

Inputs are batch first: ``(B, L, D)`` queries and ``(B, S, D)`` keys/values. Masks are
boolean, **True = may attend**, broadcastable to ``(B, H, L, S)``: the convention of
``torch.nn.functional.scaled_dot_product_attention``, and the opposite of
``torch.nn.MultiheadAttention`` (see :mod:`mha.backends.module` for the conversion).

A fully masked query row gets all-zero weights and a zero attention output, as in the
NumPy backend and in ``scaled_dot_product_attention``. When no weights are requested,
the fused and packed forms call ``scaled_dot_product_attention``, which never stores the
``(B, H, L, S)`` score tensor.

Masks are read as in :mod:`mha.backends.np_backend` (its module docstring states the rule: NumPy
broadcasting from the right, a refused ambiguous 3-D mask, an
:class:`~mha.core.masks.AmbiguousMaskWarning`
for a 2-D mask that looks like key padding when ``B = L``). Inputs, parameters and mask must
share one device. Tensors on the ``meta`` device (no values) are accepted for shape
inference: every check that needs values is skipped. ``torch.func.vmap``, ``grad`` and
``jacrev`` work over these functions (their checks read the wrapped values, through four
private names of PyTorch, looked up in one place), and so do
negative views (``is_neg()``); sparse and nested tensors are refused. Empty batches
(``B = 0``) give empty outputs. Double backward (a gradient of a gradient) needs the explicit
path, ``need_weights=True``: PyTorch's CPU kernel behind the fast path has no derivative of its
backward.

Every call reads the values of its inputs and parameters once (their finiteness and largest
magnitudes, which bound the result so that an overflow is caught): one reduction, and on an
accelerator one host synchronisation, per array. :func:`value_checks` switches these reads off
inside a block, as :func:`mha.training.runs.train` does for its training steps.

On the CPU, explicit attention without autograd and the finiteness checks take three
shortcuts that rest on behaviour NumPy and PyTorch do not document (a NumPy-allocated score
buffer, a softmax written over its input, NumPy's reduction for finiteness). They are
gathered in one place, :func:`cpu_shortcuts`, which also switches them off; the plain path
then uses documented operations only and gives the same results to rounding.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mha.backends import _mha_checks, _torch_func
from mha.core import _groups, _overflow, _validate
from mha.core._np_checks import as_numpy
from mha.core.kv_cache import KVCache
from mha.core.params import MHAParams

FLOATS = (torch.float64, torch.float32, torch.bfloat16)
# The forms this backend computes. The tiled form of mha.backends.np_backend is refused here: this
# backend has no tiled computation of its own, and need_weights=False already runs
# scaled_dot_product_attention, whose kernel PyTorch chooses.
FORMS = ("per_head", "fused", "packed")


def _max_abs(x: torch.Tensor) -> float:
    """The largest ``|x|``: ``inf`` when ``x`` holds NaN or infinity, 0 when it holds nothing.

    The extremes of ``x`` are finite exactly when every entry is (min and max propagate
    NaN), and one ``aminmax`` pass is many times cheaper than ``isfinite(x).all()``; the
    largest magnitude comes with them. With the CPU shortcuts, NumPy reduces a
    float32/float64 CPU tensor instead. Under ``torch.func`` transforms the wrapped values
    are read; a ``meta`` tensor holds no values (0: shape inference only).
    """
    if x.numel() == 0:
        return 0.0
    if _torch_func.in_transform():
        with _torch_func.FUNCTORCH.disable():  # read the values outside the transforms
            return _max_abs_of_values(_torch_func.values(x))
    return _max_abs_of_values(x)


def _max_abs_of_values(x: torch.Tensor) -> float:
    """:func:`_max_abs` of a plain (unwrapped) tensor."""
    if x.device.type == "meta":
        return 0.0
    if _shortcuts_apply(x) and x.dtype in _NUMPY_FLOATS and not x.is_neg():
        return _max_abs_by_numpy(x)
    with torch.no_grad():
        lo, hi = torch.aminmax(x)
    return _validate.extremes_max_abs(lo.item(), hi.item())


def _numpy_values(x: torch.Tensor) -> np.ndarray | None:
    """``x``'s values as a NumPy array (``None`` for a ``meta`` tensor, which has none)."""
    if _torch_func.in_transform():
        with _torch_func.FUNCTORCH.disable():  # read the values outside the transforms
            x = _torch_func.values(x)
            return None if x.device.type == "meta" else as_numpy("x", x)
    return None if x.device.type == "meta" else as_numpy("x", x)


@contextmanager
def _switched(setting: contextvars.ContextVar[bool], enabled: bool) -> Iterator[None]:
    """``setting`` set to ``enabled`` inside the block, restored when it ends (by an exception
    too); ``enabled`` must be a bool."""
    _validate.check_bool("enabled", enabled)
    token = setting.set(enabled)
    try:
        yield
    finally:
        setting.reset(token)


_VALUE_CHECKS = contextvars.ContextVar("mha_torch_backend_value_checks", default=True)


@contextmanager
def value_checks(enabled: bool) -> Iterator[None]:
    """Switch the checks that read tensors' values on or off inside the block (on by default).

    With the checks on, every function of this module reads each input and parameter once:
    NaN and infinity are refused, and the largest magnitudes bound every intermediate, so
    that an overflow raises instead of returning a non-finite or wrong result. Each read is a
    reduction whose answer the host waits for: one synchronisation per array and per call.

    With them off, the block's calls check only what needs no values (kinds, dtypes, shapes,
    devices and options) and compute as PyTorch does: NaN or infinity in an input, or an
    overflow, comes out in the result, unreported. A key/value cache still measures what it
    appends (no bound comes from the inputs), so its own bound stays true. The results are
    the same tensors either way: the checks only read.

    Turn them off where the values are known to be fit, e.g. a model's own training steps
    whose loss is checked once per step (:func:`mha.training.runs.train`).

    Args:
        enabled: ``False`` to skip the checks of values inside the block, ``True`` to run them.

    Yields:
        Nothing; the setting applies to this thread (and task) until the block ends, and
        is restored when it ends, by an exception too.

    Raises:
        TypeError: if ``enabled`` is not a bool.
    """
    with _switched(_VALUE_CHECKS, enabled):
        yield


_ARRAYS = _validate.ArrayKind(
    "torch.Tensor",
    torch.Tensor,
    FLOATS,
    torch.bool,
    _max_abs,
    "to_torch",
    lambda dtype: float(torch.finfo(dtype).max),
    _numpy_values,
    _validate.check_dense,
    lambda x: x.device,
    _VALUE_CHECKS.get,
)


def causal_mask(
    q_len: int,
    kv_len: int | None = None,
    device: torch.device | None = None,
    *,
    align: str = "top_left",
) -> torch.Tensor:
    """Boolean causal mask: query ``i`` may attend to the keys at or before its position.

    With ``L = S`` both alignments give the lower triangle, keys ``j <= i``. They differ
    when ``L != S``:

    - ``"top_left"`` (the default): query ``i`` sits at position ``i``, and sees keys
      ``j <= i``, as ``scaled_dot_product_attention(is_causal=True)`` and
      ``torch.nn.attention.bias.causal_upper_left``.
    - ``"bottom_right"``: the queries are the *last* ``L`` of ``S`` positions, query ``i``
      at position ``S - L + i``, and it sees keys ``j <= S - L + i``: decoding with a
      key/value cache, and ``torch.nn.attention.bias.causal_lower_right``. With ``L > S``
      its first ``L - S`` rows are fully masked.

    Args:
        q_len: query length L.
        kv_len: key length S (defaults to L).
        device: where to create the mask.
        align: ``"top_left"`` or ``"bottom_right"``, where query 0 sits.

    Shape:
        Returns ``(L, S)``.

    Returns:
        A boolean tensor, True on and below the diagonal.

    Raises:
        ValueError: if a length is not positive, ``align`` is not one of the two, or
            ``device`` names no device available here.
        TypeError: if a length is not an int or ``device`` is not a device or a name.
    """
    kv_len = q_len if kv_len is None else kv_len
    _validate.check_length("q_len", q_len, "L")
    _validate.check_length("kv_len", kv_len, "S")
    _validate.check_align(align)
    device = _validate.check_device("device", device)
    offset = 0 if align == "top_left" else kv_len - q_len  # query i sits at i + offset
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(offset)


def key_padding_mask(lengths: torch.Tensor | list[int], kv_len: int) -> torch.Tensor:
    """Boolean mask letting each batch element attend only to its first ``lengths[b]`` keys.

    Args:
        lengths: number of real (non-padding) keys per batch element, each in ``[0, S]``.
        kv_len: key length S.

    Shape:
        lengths ``(B,)``; returns ``(B, 1, 1, S)``, which broadcasts to ``(B, H, L, S)``
        (``B = 0`` for an empty list gives an empty mask).

    Returns:
        A boolean tensor, True for the first ``lengths[b]`` keys of row ``b``.

    Raises:
        ValueError: if ``lengths`` is not 1-D or a length is outside ``[0, S]``.
        TypeError: if ``lengths`` are not integers or ``kv_len`` is not an int.
    """
    _validate.check_length("kv_len", kv_len, "S")
    if isinstance(lengths, list | tuple) and len(lengths) == 0:
        lengths = torch.zeros(0, dtype=torch.int64)  # an empty list has no dtype to check
    try:
        lengths = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            "lengths must be a 1-D sequence or tensor of integers; got "
            f"{_validate.describe(lengths)}"
        ) from None
    if lengths.ndim != 1:
        raise ValueError(f"lengths must have shape (B,); got shape {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be integers; got dtype {lengths.dtype}")
    if lengths.device.type == "meta":
        raise TypeError("lengths must hold values; got a meta tensor")
    if ((lengths < 0) | (lengths > kv_len)).any():
        raise ValueError(f"lengths must lie in [0, kv_len={kv_len}]; got {lengths.tolist()}")
    keep = torch.arange(kv_len, device=lengths.device)[None, :] < lengths[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Masked softmax over the last dimension (out of place, so autograd works).

    Masked entries get weight exactly 0; a row with every entry masked gets all zeros
    (and zero gradient, never NaN). Low-precision scores are normalised in float32.

    Args:
        scores: the scores, a floating tensor.
        mask: optional boolean keep-mask (True = may attend).

    Shape:
        scores ``(..., L, S)``; mask broadcastable to it. Returns ``(..., L, S)``.

    Returns:
        The weights, a new tensor of ``scores``' dtype (differentiable); rows sum to 1,
        fully masked rows are 0.

    Raises:
        ValueError: if ``mask`` does not broadcast or ``scores`` is not finite.
        TypeError: if ``scores`` is not a float tensor or ``mask`` is not boolean.
    """
    _validate.check_softmax(scores, mask, _ARRAYS)
    return _softmax(scores, mask)


def _softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The masked softmax of :func:`softmax` (no checks)."""
    low = scores.dtype in (torch.float16, torch.bfloat16)
    work = scores.float() if low else scores
    if mask is None:
        weights = torch.softmax(work, dim=-1)
    else:
        any_allowed = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
        work = work.masked_fill(~mask, float("-inf"))
        work = work.masked_fill(~any_allowed, 0.0)  # fully masked rows: finite, then zeroed
        weights = torch.softmax(work, dim=-1) * any_allowed
    return weights.to(scores.dtype)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(Q K^T / sqrt(Dh)) V`` with an optional boolean mask.

    Args:
        query: queries.
        key: keys, the same width as ``query``.
        value: values, the same length as ``key``.
        mask: boolean, True = may attend; broadcastable to ``(..., L, S)``.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``.
        Returns output ``(..., L, Dv)`` and weights ``(..., L, S)``.

    Returns:
        ``(output, weights)``, PyTorch tensors of the inputs' dtype. The weights' leading
        dimensions broadcast those of query, key and mask; the output's also value's.

    Raises:
        ValueError: on mismatched shapes, empty sequences, a head width ``Dh`` of 0 (the
            last dimension of query and key), a mask that does not broadcast, non-finite
            inputs, or scores that overflow the dtype.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, tensors that are not
            dense, or tensors on different devices.
    """
    m = _validate.check_attention(query, key, value, mask, _ARRAYS)
    out, weights = _attend(query, key, value, mask)
    _overflow.check_range(
        "scaled_dot_product_attention output",
        _overflow.attention_bound(m["query"], m["key"], m["value"], query.shape[-1]),
        out,
        _ARRAYS,
        lambda: _locate(_overflow.attention_overflow, out, query, key, value, mask),
    )
    return out, weights


def _largest(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)


def _locate(find: Any, result: torch.Tensor, *args: Any) -> str | None:
    """``find`` (an overflow finder of :mod:`mha.core._overflow`) on float64 copies of ``args``.

    Called only when the inputs' magnitudes do not rule an overflow out. Under
    ``torch.func`` transforms the computation is not redone (``None``), and only a
    non-finite result is caught.
    """
    tensors = []
    for a in args:
        tensors += [a.w_qkv, a.w_o] if isinstance(a, MHAParams) else [a]
    if any(isinstance(t, torch.Tensor) and _torch_func.wrapped(t) for t in tensors):
        return None

    def copy(a: Any) -> Any:
        if isinstance(a, MHAParams):
            return a.to_numpy(np.float64)
        if isinstance(a, tuple):
            return tuple(map(copy, a))
        if isinstance(a, torch.Tensor):
            a = as_numpy("x", a)
            return a if a.dtype == np.bool_ else a.astype(np.float64)
        return a

    return find(*map(copy, args), largest=_largest(result.dtype))


def _recording(*tensors: torch.Tensor) -> bool:
    """True when autograd records operations on any of ``tensors``."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _attend(q, k, v_, mask):
    """Explicit attention: output ``(..., L, Dv)`` and weights ``(..., L, S)``."""
    if _recording(q, k, v_) or not _shortcuts_apply(q):
        return _attend_plain(q, k, v_, mask)
    return _attend_cpu_shortcut(q, k, v_, mask)


def _attend_plain(q, k, v_, mask):
    """The explicit path in documented operations; autograd records it."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    # Scaling Q (L x Dh entries) costs less than scaling the scores (L x S entries).
    scores = (q * scale) @ k.transpose(-1, -2)  # (..., L, Dh) @ (..., Dh, S) -> (..., L, S)
    weights = _softmax(scores, mask)  # (..., L, S)
    return weights @ v_, weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)


def _attend_fast(q, k, v_, mask):
    """SDPA without materialising weights; fully masked rows give zeros, as in ``_attend``.

    With fewer key/value heads than query heads, SDPA's ``enable_gqa`` lets each key/value
    head serve its group of query heads. A decoding step (one query per head, ``L = 1``)
    with a mask shared by the heads instead lays each group's ``G`` queries out as ``G``
    rows against their one key/value head: SDPA's CPU kernel then reads each cached key
    and value once per group rather than once per query head (2.2x faster at H = 16,
    H_kv = 1, S = 16,384).
    """
    if mask is not None and mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + tuple(mask.shape))  # (S,) -> (1, S)
    B, H, L, Dh = q.shape
    H_kv = k.shape[-3]
    if H_kv == H:
        return F.scaled_dot_product_attention(q, k, v_, attn_mask=mask)
    if L == 1 and (mask is None or mask.ndim < 3 or mask.shape[-3] == 1):
        rows = q.reshape(B, H_kv, H // H_kv, Dh)  # (B, H_kv, G, Dh): a group's queries as rows
        out = F.scaled_dot_product_attention(rows, k, v_, attn_mask=mask)  # (B, H_kv, G, Dv)
        return out.reshape(B, H, 1, out.shape[-1])  # (B, H, 1, Dv)
    return F.scaled_dot_product_attention(q, k, v_, attn_mask=mask, enable_gqa=True)


def _grouped_attend(q, k, v_, mask, num_kv_heads: int):
    """:func:`_attend` over heads; with ``H_kv < H``, each key/value head serves its group.

    As :func:`mha.backends.np_backend.multi_head_attention` does: grouped queries
    ``(B, H_kv, G, L, Dh)`` against keys and values ``(B, H_kv, 1, S, Dh)``, broadcast over
    the group instead of copied, then laid out per query head again.
    """
    B, H = q.shape[:2]
    if num_kv_heads == H:
        return _attend(q, k, v_, mask)
    qg = _groups.group_queries(q, num_kv_heads)  # (B, H_kv, G, L, Dh)
    grouped = _groups.group_mask(mask, num_kv_heads)
    out, weights = _attend(qg, k[:, :, None], v_[:, :, None], grouped)  # (B, H_kv, G, L, .)
    return out.reshape(B, H, *out.shape[3:]), weights.reshape(B, H, *weights.shape[3:])


# ---- the CPU shortcuts -------------------------------------------------------------------

_SHORTCUTS = contextvars.ContextVar("mha_torch_backend_cpu_shortcuts", default=True)
_NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}


@contextmanager
def cpu_shortcuts(enabled: bool) -> Iterator[None]:
    """Switch this module's CPU shortcuts on or off inside the block (they are on by default).

    Three shortcuts make explicit attention on the CPU faster; each rests on behaviour that
    NumPy or PyTorch does not document, so each can be switched off here, and the plain
    path that replaces it uses documented operations only:

    - finiteness: a float32/float64 CPU tensor is reduced by NumPy, on the calling thread,
      through a view (``Tensor.numpy()``). A PyTorch reduction of a large tensor waits for
      every intra-op thread, and on a busy machine that wait can cost milliseconds where
      the work takes a fraction of one. Plain: ``torch.aminmax``. The answer is the same
      boolean.
    - the score buffer: when autograd does not record, the ``(..., L, S)`` scores are written
      into a buffer that NumPy allocates. NumPy asks the kernel for huge pages for large
      arrays (an allocator and OS behaviour), so the first writes fault once per 2 MiB
      rather than once per 4 KiB page, which for a 32 MiB score tensor saves milliseconds.
      The matrix products get contiguous operands (heads split from a projection are
      strided views), which may take another BLAS kernel and so round differently.
    - the softmax in place: the softmax is written over the scores
      (``torch.softmax(x, dim=-1, out=x)``; PyTorch's CPU kernel reads each row before
      writing it, which PyTorch does not document), so one ``(..., L, S)`` tensor is held
      where the plain path holds two, the scores and the weights. The values are those of
      the plain softmax exactly: the same kernel on the same scores.

    Plain: the path autograd records (scores, then an out-of-place softmax). The two paths
    agree to rounding, which the tests check; :mod:`mha.cost.peak_memory` and the book measure the
    memory of the default (shortcut) path.

    Args:
        enabled: ``False`` for the plain path inside the block, ``True`` for the shortcuts.

    Yields:
        Nothing; the setting applies to this thread (and task) until the block ends.

    Raises:
        TypeError: if ``enabled`` is not a bool.
    """
    with _switched(_SHORTCUTS, enabled):
        yield


def _shortcuts_apply(x: torch.Tensor) -> bool:
    """True when the CPU shortcuts are on and ``x`` lives on the CPU, outside ``torch.func``."""
    return _SHORTCUTS.get() and x.device.type == "cpu" and not _torch_func.in_transform()


def _max_abs_by_numpy(x: torch.Tensor) -> float:
    a = x.detach().numpy()  # a view, no copy
    return _validate.extremes_max_abs(a.min(), a.max())


def _empty_scores(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An uninitialised CPU tensor of ``like``'s dtype, allocated by NumPy when it can."""
    if like.dtype in _NUMPY_FLOATS:
        return torch.from_numpy(np.empty(shape, dtype=_NUMPY_FLOATS[like.dtype]))
    return torch.empty(shape, dtype=like.dtype)


def _attend_cpu_shortcut(q, k, v_, mask):
    """:func:`_attend_plain`'s arithmetic without autograd, in one ``(..., L, S)`` buffer."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    q = torch.mul(q, scale, out=torch.empty(q.shape, dtype=q.dtype))  # contiguous
    shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    if mask is not None:  # a mask may add batch dimensions, as masked_fill does in _attend_plain
        shape = torch.broadcast_shapes(shape, mask.shape)
        q = q.expand(*shape[:-2], *q.shape[-2:])  # (..., L, Dh), a view
    scores = torch.matmul(q, k.contiguous().transpose(-1, -2), out=_empty_scores(shape, q))
    weights = _softmax_(scores, mask)  # the same tensor as scores, now holding the weights
    return weights @ v_.contiguous(), weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)


def _softmax_(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The masked softmax of :func:`_softmax`, written over ``scores`` (returned).

    The same operations in the same order, so the result equals ``_softmax``'s exactly.
    Low-precision scores are normalised in a float32 copy that is then rounded back into
    ``scores``, as ``_softmax`` rounds its float32 result.
    """
    low = scores.dtype in (torch.float16, torch.bfloat16)
    work = scores.float() if low else scores  # (..., L, S)
    if mask is not None:
        any_allowed = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
        work.masked_fill_(~mask, float("-inf"))
        work.masked_fill_(~any_allowed, 0.0)  # fully masked rows: finite, then zeroed
    torch.softmax(work, dim=-1, out=work)  # row by row, each row read before it is written
    if mask is not None:
        work.mul_(any_allowed)
    return scores.copy_(work) if low else work


# ---- multi-head attention -----------------------------------------------------------------


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the model width into heads (a view when ``x`` is contiguous in its width).

    Args:
        x: a tensor whose width is D.
        num_heads: number of heads H; must divide D.

    Shape:
        ``(B, L, D)`` -> ``(B, H, L, Dh)``.

    Returns:
        Head ``h`` is the column block ``h * Dh : (h + 1) * Dh`` of ``x``.

    Raises:
        ValueError: if ``x`` is not 3-D or H does not divide its width.
    """
    _validate.check_rank("x", x, 3, "(B, L, D)")
    B, L, D = x.shape
    _validate.check_sizes(D, num_heads)
    return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2)  # -> (B, H, L, Dh)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads back into the model width (the inverse of ``split_heads``).

    Args:
        x: per-head tensors stacked along dimension 1.

    Shape:
        ``(B, H, L, Dh)`` -> ``(B, L, D)``.

    Returns:
        The heads side by side, a tensor of width ``H * Dh``.

    Raises:
        ValueError: if ``x`` is not 4-D.
    """
    _validate.check_rank("x", x, 4, "(B, H, L, Dh)")
    B, H, L, Dh = x.shape
    return x.transpose(1, 2).reshape(B, L, H * Dh)  # (B, H, L, Dh) -> (B, L, D)


def _linear(x, w, b):
    return (
        x @ w
        if b is None
        else torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[-1])
    )


def multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    params: MHAParams,
    mask: torch.Tensor | None = None,
    *,
    form: str = "fused",
    need_weights: bool = True,
    cache: KVCache | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``Concat(head_1, ..., head_H) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The forms and arguments are those of :func:`mha.backends.np_backend.multi_head_attention`,
    except the ``"tiled"`` form, which is refused: this backend has no tiled computation of
    its own (:data:`FORMS` lists the forms it computes). With ``need_weights=False`` the fused
    and packed forms use ``torch.nn.functional.scaled_dot_product_attention`` (the fast path).
    :class:`mha.MultiHeadAttention` defaults to that path (``need_weights=False``,
    ``form="packed"``); its ``forward`` says why.

    Args:
        query: queries.
        key: keys (pass ``query`` again for self-attention).
        value: values.
        params: the layer's parameters, PyTorch tensors of the inputs' dtype and device.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)`` by NumPy's rule,
            aligned from the right: ``(L, S)`` for every batch element and head, ``(H, L, S)``
            per head, ``(B, 1, 1, S)`` (:func:`key_padding_mask`) or ``(B, 1, L, S)`` per
            batch element. A ``(B, S)`` or ``(B, L, S)`` mask is *not* read per batch
            element; a 3-D mask whose leading size equals both B and H is refused, and a
            padding-like 2-D mask with B = L warns (see the module's "How a mask is read").
        form: ``"per_head"``, ``"fused"`` or ``"packed"`` (:data:`FORMS`).
        need_weights: return the attention weights (the explicit path) or not (the fast path).
        cache: a :class:`mha.core.kv_cache.KVCache` of PyTorch buffers on the inputs' device,
            as in :func:`mha.backends.np_backend.multi_head_attention` (atomic: a refused call
            leaves it as it was). Autograd records through it: gradients through cached steps
            equal those of the full causal forward (while recording, each step's append
            writes a new buffer, see :meth:`mha.core.kv_cache.KVCache.append`).

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)`` (with a cache: the ``n`` new
        positions, and ``S`` is the cache's length after appending them). Returns output
        ``(B, L, D)`` and weights ``(B, H, L, S)`` (or ``None`` when ``need_weights`` is
        False).

    Returns:
        ``(output, weights)``, PyTorch tensors of the inputs' dtype (autograd records
        them when it records the inputs or parameters); ``weights`` is ``None`` when
        ``need_weights`` is False.

    Raises:
        ValueError: on mismatched shapes, empty sequences, a mask that does not
            broadcast, non-finite inputs, a ``form`` not in :data:`FORMS` (``"tiled"``
            included), an output that would overflow, or a cache that does not fit the layer
            or the call, is full, holds NaN or infinity, or holds entries beyond its
            ``max_abs`` that overflow the output.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, wrong ``params``, or a
            cache that is not a ``KVCache`` of tensors of the inputs' dtype and device.
    """
    magnitudes = _mha_checks.check_mha(
        query, key, value, params, mask, form, _ARRAYS, cache, forms=FORMS
    )
    _validate.check_form_weights(form, need_weights)
    H, H_kv, D, kv_cols = params.num_heads, params.num_kv_heads, params.d_model, params.kv_width
    if form == "per_head":
        heads, weights = [], []
        for h in range(H):
            blk = params.head(h)
            q = _linear(query, blk["w_q"], blk["b_q"])  # (B, L, D) -> (B, L, Dh)
            k = _linear(key, blk["w_k"], blk["b_k"])  # (B, S, D) -> (B, S, Dh)
            val = _linear(value, blk["w_v"], blk["b_v"])  # (B, S, D) -> (B, S, Dh)
            head_mask = None if mask is None else _groups.head_slice(mask, h)
            out_h, w_h = _attend(q, k, val, head_mask)  # (B, L, Dh), (B, L, S)
            heads.append(out_h)
            if need_weights:  # otherwise each head's (B, L, S) weights are freed in turn
                weights.append(w_h)
            del w_h  # before the next head's scores exist: one (B, L, S) tensor at a time
        out = _linear(torch.cat(heads, dim=-1), params.w_o, params.b_o)  # (B, L, D)
        _check_mha_range(magnitudes, out, query, key, value, params, mask, cache)
        return out, (torch.stack(weights, dim=1) if need_weights else None)  # (B, H, L, S)

    if form == "packed" and query is key and key is value:
        qkv = _linear(query, params.w_qkv, params.b_qkv)  # (B, L, D) -> (B, L, D + 2 H_kv Dh)
        q, k, val = qkv.split([D, kv_cols, kv_cols], dim=-1)  # (B, L, D), 2 x (B, L, H_kv Dh)
    elif form == "packed" and key is value:
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        k, val = _linear(key, *params.packed("kv")).split(kv_cols, dim=-1)  # 2 x (B, S, .)
    else:
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        k = _linear(key, params.w_k, params.b_k)  # (B, S, H_kv Dh)
        val = _linear(value, params.w_v, params.b_v)  # (B, S, H_kv Dh)
    q = split_heads(q, H)  # (B, L, D) -> (B, H, L, Dh)
    k, val = split_heads(k, H_kv), split_heads(val, H_kv)  # (B, H_kv, S, Dh)
    # With a cache: every cached position and these new ones, (B, H_kv, S, Dh); the cache
    # keeps the new ones only if every check below passes.
    with _mha_checks.cached(cache, k, val, magnitudes, D) as (k, val):
        if need_weights:
            out, weights = _grouped_attend(q, k, val, mask, H_kv)  # (B, H, L, Dh), (B, H, L, S)
        else:
            out, weights = _attend_fast(q, k, val, mask), None  # (B, H, L, Dh)
        out = _linear(merge_heads(out), params.w_o, params.b_o)  # (B, L, D)
        _check_mha_range(magnitudes, out, query, key, value, params, mask, cache)
    return out, weights


def _check_mha_range(
    magnitudes: dict[str, float],
    out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    params: MHAParams,
    mask: torch.Tensor | None,
    cache: KVCache | None,
) -> None:
    """Raise if the layer overflowed (no pass over any array while the bound holds).

    With a cache, it has not appended this call's positions yet: it holds those before the
    call. A non-finite output is checked for NaN or infinity in the cache first.
    """
    cached = None
    if cache is not None:
        magnitudes = {**magnitudes, "cache": cache.max_abs}
        _mha_checks.check_cached_output(cache, out, _ARRAYS)
        cached = (cache.keys, cache.values)  # the positions cached before this call

    def locate() -> str | None:
        if cache is not None:
            _mha_checks.check_cache_finite(cache, _ARRAYS)
        return _locate(_overflow.mha_overflow, out, query, key, value, params, mask, cached)

    _overflow.check_range(
        "multi_head_attention output",
        _overflow.mha_bound(magnitudes, params.d_model, params.num_heads),
        out,
        _ARRAYS,
        locate,
    )


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer normalisation over the last dimension, as ``torch.nn.LayerNorm``.

    Args:
        x: the tensor to normalise over its last dimension.
        weight: the scale ``gamma``, or ``None`` for ones.
        bias: the shift ``beta``, or ``None`` for zeros.
        eps: added to the variance before the square root.

    Shape:
        x ``(..., D)``, weight and bias ``(D,)``. Returns ``(..., D)``.

    Returns:
        ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased variance, as in PyTorch).

    Raises:
        ValueError: if ``eps`` is not positive and finite, ``weight``/``bias`` are not
            ``(D,)``, an input is not finite, or a row of ``x`` spreads so widely that its
            variance would overflow (``D (max - min)^2`` reaches the dtype's largest value).
        TypeError: on non-float or mixed dtypes, a non-number ``eps`` (such as a tensor),
            or tensors on different devices.
    """
    magnitudes = _validate.check_layer_norm(x, weight, bias, eps, _ARRAYS)
    variance, bound = _overflow.layer_norm_bound(magnitudes, x.shape[-1])
    largest = _largest(x.dtype)
    if _VALUE_CHECKS.get() and variance * _overflow.RANGE_MARGIN >= largest:  # a pass over rows
        with torch.no_grad():
            lo, hi = torch.aminmax(_torch_func.values(x), dim=-1)
        spread = float((hi.double() - lo.double()).max())
        _overflow.check_layer_norm_range(spread, x.shape[-1], largest, x.dtype)
    y = F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    _overflow.check_range("layer_norm output", bound, y, _ARRAYS, lambda: None)
    return y


def attention_block(
    x: torch.Tensor,
    params: MHAParams,
    mask: torch.Tensor | None = None,
    *,
    ln_weight: torch.Tensor | None = None,
    ln_bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    form: str = "fused",
    norm_first: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A residual block around self-attention, with layer normalisation after or before it.

    - ``norm_first=False`` (post-norm, Vaswani et al.): ``LayerNorm(X + MultiHead(X))``.
    - ``norm_first=True`` (pre-norm, GPT-2 and most later models):
      ``X + MultiHead(LayerNorm(X))``; the residual path carries ``X`` unchanged, and the
      output is not normalised.

    The argument has the name and meaning of ``norm_first`` in
    ``torch.nn.TransformerEncoderLayer``.

    Args:
        x: the block's input tensor, which is the queries, keys and values.
        params: the attention layer's PyTorch parameters, of ``x``'s dtype and device.
        mask: optional boolean tensor, True = may attend; broadcastable to ``(B, H, L, L)``.
        ln_weight: the layer norm's scale (``None``: ones).
        ln_bias: the layer norm's shift (``None``: zeros).
        eps: added to the variance in the layer norm.
        form: the form of :func:`multi_head_attention`: ``"per_head"``, ``"fused"`` or
            ``"packed"``.
        norm_first: normalise before the attention (pre-norm) instead of after the sum.

    Shape:
        x ``(B, L, D)``. Returns output ``(B, L, D)`` and weights ``(B, H, L, L)``.

    Returns:
        ``(output, weights)``: the block's output (the normalised residual sum with
        post-norm, the residual sum with pre-norm) and the attention weights.

    Raises:
        TypeError: if ``norm_first`` is not a bool; and the errors of
            :func:`multi_head_attention` and :func:`layer_norm`.
    """
    _validate.check_bool("norm_first", norm_first)
    if norm_first:
        normed = layer_norm(x, ln_weight, ln_bias, eps)
        attn, weights = multi_head_attention(normed, normed, normed, params, mask, form=form)
        return x + attn, weights
    attn, weights = multi_head_attention(x, x, x, params, mask, form=form)
    return layer_norm(x + attn, ln_weight, ln_bias, eps), weights
