"""A PyTorch module for multi-head attention, and converters to and from PyTorch's own.

``MultiHeadAttention`` stores its weights in this package's layout (right-multiplied,
``[W_q | W_k | W_v]`` packed as ``(D, 3D)``); ``torch.nn.MultiheadAttention`` stores
``in_proj_weight`` as ``(3D, D)`` and left-multiplies, so the converters transpose.
Masks: this package says True = may attend; ``nn.MultiheadAttention`` says True =
blocked. :func:`to_torch_attn_mask` converts at that boundary and nowhere else.
"""

from __future__ import annotations

import torch
from torch import nn

from mha.backends import torch_backend, torch_checks
from mha.core import packing
from mha.core._checks import arguments, layer
from mha.core.kv_cache import KVCache
from mha.core.params import MHAParams, init_params
from mha.core.rotary import Rotary


class MultiHeadAttention(nn.Module):
    """Multi-head attention with batch-first inputs and boolean keep-masks.

    Args:
        d_model: model width D.
        num_heads: number of heads H; must divide D.
        bias: whether the input and output projections have biases.
        num_kv_heads: key/value heads H_kv, dividing H (``None``: H, multi-head
            attention; 1: multi-query attention).
        seed: seed of the initial parameters (see :func:`mha.core.params.init_params`); the
            NumPy backend gets the same model from ``init_params(..., seed=seed)``. ``None``
            (the default) draws the seed from torch's default generator, as ``torch.nn``
            layers draw their weights: ``torch.manual_seed`` makes the module reproducible,
            and modules built one after another differ.
        dtype: parameter dtype (float64, float32 or bfloat16).
        device: parameter device (a ``torch.device`` or a name such as ``"cpu"``; ``"meta"``
            gives a module for shape inference).
        rotary: rotary positions (:class:`mha.core.rotary.Rotary`) that every ``forward``
            applies to the queries and keys, or ``None``; kept as :attr:`rotary` (a setting,
            not a parameter: ``state_dict`` does not hold it).

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)``, mask broadcastable to
        ``(B, H, L, S)`` from the right (``(L, S)``, ``(H, L, S)``, ``(B, 1, 1, S)``,
        ``(B, 1, L, S)``; see ``forward``). Output ``(B, L, D)``, weights ``(B, H, L, S)``.

    Raises:
        ValueError: if a size is not positive, H does not divide D, ``seed`` is negative,
            ``device`` names no device available here, or ``rotary`` is given with an odd
            head width; in ``forward``, as
            :func:`mha.backends.torch_backend.multi_head_attention`.
        TypeError: if a size or ``seed`` is not an int, ``bias`` is not a bool, ``dtype`` is
            not one of the three, ``device`` is not a device or a name, or ``rotary`` is not
            a ``Rotary``; in ``forward``, as
            :func:`mha.backends.torch_backend.multi_head_attention`.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        bias: bool = True,
        *,
        num_kv_heads: int | None = None,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        rotary: Rotary | None = None,
    ) -> None:
        super().__init__()
        arguments.check_sizes(d_model, num_heads)
        if dtype not in torch_checks.FLOATS:
            names = ", ".join(str(d) for d in torch_checks.FLOATS)
            raise TypeError(f"dtype must be a floating dtype ({names}); got dtype {dtype}")
        state = None
        if seed is None:  # torch's default generator draws it, so torch.manual_seed governs it
            state = torch.get_rng_state()
            seed = int(torch.randint(2**63 - 1, ()))
        try:
            params = init_params(
                d_model, num_heads, num_kv_heads=num_kv_heads, bias=bias, seed=seed
            )
            layer.check_rotary(rotary, params)
            params = params.to_torch(dtype, device)
        except BaseException:
            if state is not None:  # a refused call leaves the generator as it was
                torch.set_rng_state(state)
            raise
        self.num_heads = num_heads
        self.num_kv_heads = params.num_kv_heads
        self.rotary = rotary
        self.w_qkv = nn.Parameter(params.w_qkv)  # (D, D + 2 H_kv Dh)
        self.w_o = nn.Parameter(params.w_o)  # (D, D)
        b_qkv, b_o = params.b_qkv, params.b_o  # None without bias
        self.b_qkv = None if b_qkv is None else nn.Parameter(b_qkv)  # (D + 2 H_kv Dh,)
        self.b_o = None if b_o is None else nn.Parameter(b_o)  # (D,)

    @property
    def d_model(self) -> int:
        """Model width D."""
        return self.w_qkv.shape[0]

    @property
    def d_head(self) -> int:
        """Head width Dh."""
        return self.d_model // self.num_heads

    def extra_repr(self) -> str:
        """What ``repr(module)`` shows inside the parentheses.

        Returns:
            The sizes and, when set, the rotary positions.
        """
        sizes = f"d_model={self.d_model}, num_heads={self.num_heads}"
        kv = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        return sizes + kv + ("" if self.rotary is None else f", rotary={self.rotary}")

    @classmethod
    def from_params(
        cls, params: MHAParams, dtype: torch.dtype | None = None, *, rotary: Rotary | None = None
    ) -> MultiHeadAttention:
        """A module holding a copy of ``params`` (NumPy or PyTorch), cast to ``dtype``.

        Args:
            params: the parameters to copy.
            dtype: the module's dtype; ``None`` keeps the dtype of ``params``.
            rotary: the module's rotary positions, or ``None``.

        Returns:
            A new ``MultiHeadAttention`` whose parameters equal ``params``.

        Raises:
            TypeError: if ``params`` is not ``MHAParams``, ``dtype`` is not one of the
                module's dtypes, or ``rotary`` is not a ``Rotary``.
            ValueError: if ``params`` has one of the two biases but not the other, or
                ``rotary`` is given with an odd head width.
        """
        if not isinstance(params, MHAParams):
            raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
        t = params.to_torch(dtype)
        if (t.b_qkv is None) != (t.b_o is None):
            raise ValueError(
                "params must have both biases or neither (b_qkv and b_o); got "
                f"b_qkv={'None' if t.b_qkv is None else 'present'}, "
                f"b_o={'None' if t.b_o is None else 'present'}"
            )
        module = cls(
            params.d_model,
            params.num_heads,
            bias=t.b_qkv is not None,
            num_kv_heads=params.num_kv_heads,
            seed=0,  # overwritten below: the global generator is left alone
            dtype=t.dtype,
            device=t.w_qkv.device,
            rotary=rotary,
        )
        with torch.no_grad():
            module.w_qkv.copy_(t.w_qkv)
            module.w_o.copy_(t.w_o)
            if t.b_qkv is not None and module.b_qkv is not None:
                module.b_qkv.copy_(t.b_qkv)
            if t.b_o is not None and module.b_o is not None:
                module.b_o.copy_(t.b_o)
        return module

    def params(self) -> MHAParams:
        """The parameters as ``MHAParams`` of this module's tensors (shared, not copied).

        Returns:
            ``MHAParams`` sharing this module's parameters, so gradients reach them.
        """
        return MHAParams(
            self.w_qkv, self.w_o, self.b_qkv, self.b_o, self.num_heads, self.num_kv_heads
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        align: str = "top_left",
        need_weights: bool = False,
        form: str = "packed",
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        The defaults differ on purpose from those of the functions
        (:func:`mha.backends.torch_backend.multi_head_attention`: ``need_weights=True``,
        ``form="fused"``) and of ``nn.MultiheadAttention.forward`` (``need_weights=True``).
        The functions are what the book reads, where the weights are the object of study and
        the fused form is the one the equations write. The module is a layer inside a model
        (as in :mod:`mha.training`), where the weights are rarely read: returning them forces
        the explicit path, which stores the ``(B, H, L, S)`` scores, instead of
        ``scaled_dot_product_attention``, and the packed form projects self-attention's
        queries, keys and values with one product. Pass ``need_weights=True`` for the
        weights (per head; ``nn.MultiheadAttention`` averages them over heads by default).

        Args:
            query: queries.
            key: keys; ``None`` for ``query`` (self-attention).
            value: values; ``None`` for ``key``.
            mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)`` from the
                right, as in :func:`mha.backends.torch_backend.multi_head_attention`: ``(L, S)`` for
                all, ``(H, L, S)`` per head, ``(B, 1, 1, S)`` or ``(B, 1, L, S)`` per batch
                element (a ``(B, S)`` or ``(B, L, S)`` mask is not read per batch element).
                Keyword-only: the fourth positional argument of ``nn.MultiheadAttention``
                is ``key_padding_mask``, where True means the opposite (may not attend), so
                such a call raises ``TypeError``. Convert one as
                ``mask=~key_padding_mask[:, None, None, :]``.
            causal: let query ``i`` attend only to the keys at or before its position, without
                a mask array: the layer runs ``scaled_dot_product_attention``'s causal kernel
                (see :func:`mha.backends.torch_backend.multi_head_attention`). Equal to passing
                ``causal_mask(L, S, align=align)`` as (or with) ``mask``.
            align: where the queries sit when ``causal``: ``"top_left"`` (PyTorch's
                ``is_causal=True``) or ``"bottom_right"`` (the last ``L`` of ``S`` positions,
                as decoding with a ``cache`` needs).
            need_weights: whether to compute and return the attention weights.
            form: ``"per_head"``, ``"fused"`` or ``"packed"``
                (:data:`mha.backends.torch_backend.FORMS`).
            cache: a :class:`mha.core.kv_cache.KVCache` for incremental decoding (see
                :func:`mha.backends.torch_backend.multi_head_attention`): a refused call leaves it
                as it was, and ``backward()`` through cached steps gives the gradients of the
                full causal forward.

        Shape:
            query ``(B, L, D)``, key and value ``(B, S, D)``. Returns output ``(B, L, D)``
            and weights ``(B, H, L, S)``.

        Returns:
            ``(output, weights)``; ``weights`` is ``None`` unless ``need_weights``.

        Raises:
            ValueError, TypeError: as :func:`mha.backends.torch_backend.multi_head_attention`.
        """
        key = query if key is None else key
        value = key if value is None else value
        return torch_backend.multi_head_attention(
            query,
            key,
            value,
            self.params(),
            mask,
            causal=causal,
            align=align,
            form=form,
            need_weights=need_weights,
            cache=cache,
            rotary=self.rotary,
        )


def to_torch_mha(
    source: MultiHeadAttention | MHAParams, batch_first: bool = True
) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` computing the same map as ``source``.

    PyTorch's module has biases on both projections or on neither; when ``source`` has
    only one of them, the other is set to zero.

    Args:
        source: our module or parameters (NumPy or PyTorch).
        batch_first: the layout of the returned module's inputs (a bool).

    Returns:
        A new ``nn.MultiheadAttention`` with copied weights, in ``source``'s dtype and on its
        device; a module ``source`` also passes on its training mode.

    Raises:
        TypeError: if ``source`` is neither a :class:`MultiHeadAttention` nor
            ``MHAParams`` (an ``nn.MultiheadAttention`` included: :func:`from_torch_mha`
            converts the other way), or ``batch_first`` is not a bool.
        ValueError: if ``source`` is grouped-query attention (``nn.MultiheadAttention`` has
            one key/value head per query head; :func:`mha.core.params.repeat_kv_heads` gives
            the equivalent multi-head layer), or a module with rotary positions
            (``nn.MultiheadAttention`` has none, so it would compute another map).
    """
    if isinstance(source, nn.MultiheadAttention):
        raise TypeError(
            "source must be a mha.MultiHeadAttention or MHAParams; got a "
            "torch.nn.MultiheadAttention, which is PyTorch's module already "
            "(from_torch_mha converts it to this package's)"
        )
    if not isinstance(source, MultiHeadAttention | MHAParams):
        raise TypeError(
            f"source must be a mha.MultiHeadAttention or MHAParams; got {type(source).__name__}"
        )
    arguments.check_bool("batch_first", batch_first)
    if isinstance(source, MultiHeadAttention) and source.rotary is not None:
        raise ValueError(
            "source must have no rotary positions: nn.MultiheadAttention does not turn its "
            f"queries and keys, so it would compute another map; got rotary={source.rotary}"
        )
    p = source.params() if isinstance(source, MultiHeadAttention) else source
    if p.num_kv_heads != p.num_heads:
        raise ValueError(
            "source must be multi-head attention: nn.MultiheadAttention has no grouped-query "
            f"layout; got num_heads={p.num_heads}, num_kv_heads={p.num_kv_heads} (convert "
            "with mha.core.params.repeat_kv_heads(params) first)"
        )
    p = p.to_torch()
    has_bias = p.b_qkv is not None or p.b_o is not None
    m = nn.MultiheadAttention(
        p.d_model,
        p.num_heads,
        bias=has_bias,
        batch_first=batch_first,
        dtype=p.dtype,
        device=p.w_qkv.device,
    )
    if isinstance(source, MultiHeadAttention):
        m.train(source.training)
    with torch.no_grad():
        m.in_proj_weight.copy_(packing.to_in_proj_weight(p.w_qkv))  # (D, 3D) -> (3D, D)
        m.out_proj.weight.copy_(packing.linear_transpose(p.w_o))  # (D, D), transposed
        if has_bias:  # a missing bias of ours is a zero one of theirs
            for theirs, ours in ((m.in_proj_bias, p.b_qkv), (m.out_proj.bias, p.b_o)):
                if ours is None:
                    theirs.zero_()
                else:
                    theirs.copy_(ours)
    return m


def from_torch_mha(m: nn.MultiheadAttention) -> MultiHeadAttention:
    """Our module computing the same map as ``m`` (whatever its ``batch_first``).

    Our module is always batch first: feed it ``(B, L, D)`` even if ``m`` took
    ``(L, B, D)``. Everything else that shapes the map is kept or refused: the weights,
    biases, dtype and device are copied, the training mode and which parameters require
    grad are passed on, and what this package does not have (attention dropout, separate
    key and value widths, ``add_bias_kv``, ``add_zero_attn``, one bias without the other)
    raises instead of being dropped.

    Args:
        m: the PyTorch module to copy.

    Returns:
        A new ``MultiHeadAttention`` with copied weights, in ``m``'s dtype and on its device.

    Raises:
        ValueError: if ``m`` uses features this package does not have (attention dropout,
            separate key and value widths, ``add_bias_kv``, ``add_zero_attn``, an input
            bias without an output bias or the reverse).
        TypeError: if ``m`` is not an ``nn.MultiheadAttention`` or its dtype is not one of
            this module's (float64, float32, bfloat16).
    """
    if not isinstance(m, nn.MultiheadAttention):
        raise TypeError(f"m must be a torch.nn.MultiheadAttention; got {type(m).__name__}")
    if m.dropout != 0.0:
        raise ValueError(
            "m must have dropout=0.0: MultiHeadAttention has no attention dropout, so in "
            f"training mode it would compute another map; got dropout={m.dropout} (set "
            "m.dropout = 0.0 to convert the map m computes in eval mode)"
        )
    if m.kdim != m.embed_dim or m.vdim != m.embed_dim:
        raise ValueError(
            "m must have kdim == vdim == embed_dim; got "
            f"embed_dim={m.embed_dim}, kdim={m.kdim}, vdim={m.vdim}"
        )
    if m.bias_k is not None or m.add_zero_attn:
        raise ValueError(
            "m must not use add_bias_kv or add_zero_attn; got "
            f"add_bias_kv={m.bias_k is not None}, add_zero_attn={m.add_zero_attn}"
        )
    dtype = m.out_proj.weight.dtype if m.in_proj_weight is None else m.in_proj_weight.dtype
    if dtype not in torch_checks.FLOATS:
        names = ", ".join(str(d) for d in torch_checks.FLOATS)
        raise TypeError(
            f"m must have a floating dtype ({names}); got m.in_proj_weight.dtype {dtype} "
            "(convert with m.to(torch.float32))"
        )
    has_bias = m.in_proj_bias is not None
    if has_bias != (m.out_proj.bias is not None):
        raise ValueError(
            "m must have both biases or neither (in_proj_bias and out_proj.bias); got "
            f"in_proj_bias={'present' if has_bias else 'None'}, "
            f"out_proj.bias={'None' if m.out_proj.bias is None else 'present'}"
        )
    params = MHAParams(
        w_qkv=packing.from_in_proj_weight(m.in_proj_weight.detach()).clone(),  # -> (D, 3D)
        w_o=packing.linear_transpose(m.out_proj.weight.detach()).clone(),  # (D, D)
        b_qkv=m.in_proj_bias.detach().clone() if has_bias else None,
        b_o=m.out_proj.bias.detach().clone() if has_bias else None,
        num_heads=m.num_heads,
    )
    module = MultiHeadAttention.from_params(params)
    module.train(m.training)
    for ours, theirs in (
        (module.w_qkv, m.in_proj_weight),
        (module.w_o, m.out_proj.weight),
        (module.b_qkv, m.in_proj_bias),
        (module.b_o, m.out_proj.bias),
    ):
        if ours is not None:
            ours.requires_grad_(theirs.requires_grad)
    return module


def to_torch_attn_mask(
    mask: torch.Tensor,
    num_heads: int,
    *,
    batch_size: int | None = None,
    q_len: int | None = None,
    kv_len: int | None = None,
) -> torch.Tensor:
    """Convert our keep-mask to ``nn.MultiheadAttention``'s ``attn_mask`` (True = blocked).

    ``nn.MultiheadAttention`` wants exactly ``(L, S)`` or ``(B * H, L, S)``. Size-1
    dimensions of the mask (a key-padding mask ``(B, 1, 1, S)``, a per-head mask
    ``(1, H, L, S)``, a mask ``(..., 1)`` that is the same for every key) are expanded to
    ``batch_size``, ``q_len`` and ``kv_len`` when those are given; without them a size-1
    dimension stays 1, which ``nn.MultiheadAttention`` accepts only when that is the true
    size. For ``nn.MultiheadAttention``'s own ``key_padding_mask`` ``(B, S)`` the conversion
    is the same negation: ``~keep[:, 0, 0, :]``.

    Args:
        mask: boolean, True = may attend, 2-D ``(L|1, S|1)`` or 4-D
            ``(B|1, H|1, L|1, S|1)``.
        num_heads: H, since PyTorch wants a 3-D mask as ``(B * H, L, S)``.
        batch_size: B, to expand a mask whose batch dimension is 1.
        q_len: L, to expand a mask whose query dimension is 1.
        kv_len: S, to expand a mask whose key dimension is 1.

    Shape:
        ``(L, S)`` stays ``(L, S)``; a 4-D mask becomes ``(B * H, L, S)``.

    Returns:
        A boolean tensor, True = blocked, as ``nn.MultiheadAttention``'s ``attn_mask``.

    Raises:
        TypeError: if ``mask`` is not a dense boolean tensor, or a size is not an int.
        ValueError: if ``mask`` is neither 2-D nor 4-D, a size is not positive, or a mask
            dimension is neither 1 nor the size given for it (the head dimension: neither 1
            nor ``num_heads``).
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a boolean tensor (True = may attend); got {got}")
    arguments.check_dense("mask", mask)
    arguments.check_positive("num_heads", num_heads)
    for name, size in (("batch_size", batch_size), ("q_len", q_len), ("kv_len", kv_len)):
        if size is not None:
            arguments.check_positive(name, size)
    if mask.ndim not in (2, 4):
        raise ValueError(
            f"mask must be 2-D (L, S) or 4-D (B, H, L, S); got {mask.ndim}-D shape "
            f"{tuple(mask.shape)}"
        )
    named: tuple[tuple[str, str, int | None], ...] = (
        ("batch", "batch_size", batch_size),
        ("head", "num_heads", num_heads),
    )
    named = (named if mask.ndim == 4 else ()) + (
        ("query", "q_len", q_len),
        ("key", "kv_len", kv_len),
    )
    target = []
    for (what, name, size), n in zip(named, mask.shape, strict=True):
        if size is not None and n not in (1, size):
            raise ValueError(
                f"mask {what} dimension must be 1 or {name}={size}; got shape {tuple(mask.shape)}"
            )
        target.append(n if size is None else size)
    full = mask.expand(*target)  # (B|1, H|1, L|1, S|1) -> (B, H, L, S), or (L, S)
    if mask.ndim == 2:
        return ~full  # (L, S), True = blocked
    B, H, L, S = target
    return ~full.reshape(B * H, L, S)  # -> (B * H, L, S), True = blocked
