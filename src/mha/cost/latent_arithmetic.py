"""What multi-head latent attention costs at inference, by arithmetic: its cache and a step.

The counts of :mod:`mha.cost.arithmetic` for a latent layer (:mod:`mha.backends.latent`):
:func:`latent_cache_bytes` is the size of its cache, ``(Dc + Dr)`` elements per position and
layer, against ``2 H_kv Dh`` for a key/value cache (:func:`mha.cost.arithmetic.kv_cache_bytes`);
:func:`latent_decode_step_cost` the FLOPs and the bytes of one unfused decoding step by
either route; :class:`LatentConfig` holds a published model's sizes (:data:`DEEPSEEK_V2`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mha.core._checks import arguments
from mha.core._checks.latent import ROUTES
from mha.core.latent_params import check_latent_widths
from mha.cost.arithmetic import DecodeStepCost, itemsize


def latent_cache_bytes(
    num_layers: int,
    kv_len: int,
    d_latent: int,
    d_rope: int,
    dtype: Any = np.float16,
    *,
    batch_size: int = 1,
) -> int:
    """Bytes of a latent cache: ``layers * B * S * (Dc + Dr)`` times the item size.

    Each layer caches, per position, its latent (``Dc``) and its rotary key (``Dr``), which
    every head shares.

    Args:
        num_layers: attention layers of the model.
        kv_len: S, the positions cached.
        d_latent: Dc.
        d_rope: Dr (0 for none).
        dtype: the cache's dtype (NumPy or PyTorch).
        batch_size: the batch size, B.

    Returns:
        The size in bytes.

    Raises:
        ValueError: if a size is not positive (``d_rope``: negative).
        TypeError: if a size is not an int or ``dtype`` is not a dtype.
    """
    num_layers, kv_len, d_latent, batch_size = arguments.counts(
        num_layers=num_layers, kv_len=kv_len, d_latent=d_latent, batch_size=batch_size
    ).values()
    d_rope = arguments.size("d_rope", d_rope, 0, None)
    return num_layers * batch_size * kv_len * (d_latent + d_rope) * itemsize(dtype)


def latent_decode_step_cost(
    d_model: int,
    num_heads: int,
    d_head: int,
    d_latent: int,
    d_rope: int,
    kv_len: int,
    *,
    route: str,
    d_query_latent: int | None = None,
    dtype: Any = np.float16,
    batch_size: int = 1,
) -> DecodeStepCost:
    """FLOPs and bytes of one latent layer, unfused, producing the next token from its cache.

    The new token of each sequence attends to ``S = kv_len`` positions, ``S - 1`` of them
    cached. Both routes project the new token: its query (``2 D Dq + 2 Dq H (Dh + Dr)``
    with a query latent of width ``Dq``, else ``2 D H (Dh + Dr)``), its latent and rotary key
    (``2 D (Dc + Dr)``) and the output (``2 H Dh D``). Then:

    - ``"explicit"`` rebuilds every position's keys and values from the latents
      (``4 S Dc H Dh``) and attends with them (``2 H S (Dh + Dr)`` for the scores,
      ``2 H S Dh`` for the weighted sum). The rebuilt keys and values, ``2 S H Dh`` elements
      per sequence, are written and read back: they are bytes too.
    - ``"absorbed"`` folds ``W^UK`` into the query (``2 H Dh Dc``), scores the latents and
      rotary keys (``2 H S (Dc + Dr)``), sums the latents (``2 H S Dc``), and applies
      ``W^UV`` after (``2 H Dc Dh``).

    Bytes, as in :func:`mha.cost.arithmetic.decode_step_cost`: every weight read once
    whatever ``B``, the ``B (S - 1) (Dc + Dr)`` cached elements read and ``B (Dc + Dr)``
    written, the layer's input and output; for the explicit route the rebuilt keys and
    values written and read (``4 B S H Dh``). These are the bytes of an unfused step: a
    fused explicit kernel that rebuilds keys and values on chip would move about the
    absorbed route's bytes, while doing the same FLOPs.

    Args:
        d_model: the model width, D.
        num_heads: the number of heads, H.
        d_head: Dh.
        d_latent: Dc.
        d_rope: Dr (even; 0 for none).
        kv_len: S, the positions the new token attends to, itself included.
        route: ``"explicit"`` or ``"absorbed"``.
        d_query_latent: Dc', or ``None`` for queries projected from the input.
        dtype: the dtype of weights, cache and intermediates.
        batch_size: the batch size, B.

    Returns:
        A :class:`mha.cost.arithmetic.DecodeStepCost`.

    Raises:
        ValueError: if a size is not positive (``d_rope``: negative), ``route`` is unknown,
            or a latent is wider than the heads it feeds.
        TypeError: if a size is not an int or ``dtype`` is not a dtype.
    """
    D, H, Dh, Dc, S, B = arguments.counts(
        d_model=d_model,
        num_heads=num_heads,
        d_head=d_head,
        d_latent=d_latent,
        kv_len=kv_len,
        batch_size=batch_size,
    ).values()
    Dr = arguments.size("d_rope", d_rope, 0, None)
    if d_query_latent is not None:
        d_query_latent = arguments.size("d_query_latent", d_query_latent, high=None)
    check_latent_widths(H, Dh, Dc, Dr, d_query_latent)
    arguments.choice("route", route, ROUTES)
    if d_query_latent is None:
        query_weights = D * H * (Dh + Dr)
    else:
        query_weights = D * d_query_latent + d_query_latent * H * (Dh + Dr)
    weights = query_weights + D * (Dc + Dr) + 2 * Dc * H * Dh + H * Dh * D
    per_token = 2 * query_weights + 2 * D * (Dc + Dr) + 2 * H * Dh * D
    cache = B * (S - 1) * (Dc + Dr) + B * (Dc + Dr)  # the cached positions read, one written
    moved = weights + cache + 2 * B * D
    if route == "explicit":
        attend = 4 * S * Dc * H * Dh + 2 * H * S * (Dh + Dr) + 2 * H * S * Dh
        moved += 4 * B * S * H * Dh  # the rebuilt keys and values, written and read back
    else:
        attend = 2 * H * Dh * Dc + 2 * H * S * (Dc + Dr) + 2 * H * S * Dc + 2 * H * Dc * Dh
    return DecodeStepCost(flops=B * (per_token + attend), bytes=moved * itemsize(dtype))


@dataclass(frozen=True)
class LatentConfig:
    """The attention sizes of a published model with multi-head latent attention.

    Attributes:
        name: the model.
        num_layers: attention layers.
        d_model: the model width, D.
        num_heads: the number of heads, H.
        d_head: Dh, the width of each head's rebuilt key, value and query.
        d_latent: Dc, the cached latent's width.
        d_rope: Dr, the width of the shared rotary key (and of each head's rotary query).
        d_query_latent: Dc', the query latent's width.
        source: the citation key of the paper that gives the sizes.
        config_url: the released ``config.json`` with the same sizes.

    Raises:
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool) or a
            name is not a str.
        ValueError: if a size is not positive (``d_rope``: negative), or a latent is wider
            than the heads it feeds.
    """

    name: str
    num_layers: int
    d_model: int
    num_heads: int
    d_head: int
    d_latent: int
    d_rope: int
    d_query_latent: int
    source: str
    config_url: str

    def __post_init__(self) -> None:
        for name in ("name", "source", "config_url"):
            arguments.text(name, getattr(self, name))
        for name in ("num_layers", "d_model", "num_heads", "d_head", "d_latent",
                     "d_query_latent"):  # fmt: skip
            object.__setattr__(self, name, arguments.size(name, getattr(self, name), high=None))
        object.__setattr__(self, "d_rope", arguments.size("d_rope", self.d_rope, 0, None))
        check_latent_widths(
            self.num_heads, self.d_head, self.d_latent, self.d_rope, self.d_query_latent
        )

    def elements_per_token(self) -> int:
        """Elements one layer caches per token: ``Dc + Dr``.

        Returns:
            ``d_latent + d_rope``.
        """
        return self.d_latent + self.d_rope

    def cache_bytes(self, kv_len: int, dtype: Any = np.float16, *, batch_size: int = 1) -> int:
        """Bytes of the whole model's latent cache after ``kv_len`` tokens.

        Args:
            kv_len: tokens seen.
            dtype: the cache's dtype.
            batch_size: the batch size, B.

        Returns:
            :func:`latent_cache_bytes` at the model's sizes.

        Raises:
            ValueError: if ``kv_len`` or ``batch_size`` is not positive.
            TypeError: if a size is not an int or ``dtype`` is not a dtype.
        """
        return latent_cache_bytes(
            self.num_layers, kv_len, self.d_latent, self.d_rope, dtype, batch_size=batch_size
        )

    def equal_kv_heads(self) -> float:
        """The key/value heads of grouped-query attention whose cache is as large:
        ``(Dc + Dr) / (2 Dh)``.

        Returns:
            A number of heads, not necessarily whole.
        """
        return self.elements_per_token() / (2 * self.d_head)


DEEPSEEK_V2 = LatentConfig(
    "DeepSeek-V2",
    num_layers=60,
    d_model=5120,
    num_heads=128,
    d_head=128,
    d_latent=512,
    d_rope=64,
    d_query_latent=1536,
    source="deepseek2024v2",
    config_url="https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json",
)
"""DeepSeek-V2's attention: section 3.1.2 of its paper (``kv_lora_rank``, ``q_lora_rank``,
``qk_rope_head_dim``, ``qk_nope_head_dim`` = ``v_head_dim`` in its ``config.json``)."""
