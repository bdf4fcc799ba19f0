"""What one multi-head attention forward costs, by arithmetic: FLOPs, matmul calls, bytes.

The models are exact counts, not orders of magnitude: :func:`attention_flops` counts every
multiply-add of the four matrix-multiply stages as 2 FLOPs (the convention of
``torch.utils.flop_counter.FlopCounterMode``; :func:`matmul_flops` for one product) and,
separately, the element-wise work that ``FlopCounterMode`` does not count (bias additions,
the ``1/sqrt(Dh)`` scaling, the softmax). :func:`matmul_calls` is how many matrix products
each form dispatches, and :func:`score_tensor_bytes` the size of the ``(B, H, L, S)`` score
tensor.

For inference, :func:`kv_cache_bytes` is the size of a key/value cache (with the attention
sizes of published models, :class:`PublishedConfig`), :func:`decode_step_cost` the FLOPs and
bytes of one decoding step with or without the cache, and :func:`roofline_time` the time an
:class:`Accelerator` needs for it, bounded by its compute or its memory bandwidth
(:class:`RooflineTime`).

Nothing here runs attention: :mod:`mha.cost.measure` measures what a real run did (FLOPs counted
by PyTorch, operators, memory, time), and the tests and the book check each model against it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mha.core._checks import arguments, layer
from mha.cost._counts import Counts

# --- FLOPs: the model --------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionFlops(Counts):
    """FLOPs of one multi-head attention forward, stage by stage (multiply-add = 2 FLOPs).

    The first six stages are matrix multiplies (what ``FlopCounterMode`` counts); the
    last three are element-wise extras (what it does not count).

    Attributes:
        q_proj: the query projection ``x @ W_q``.
        k_proj: the key projection ``x @ W_k``.
        v_proj: the value projection ``x @ W_v``.
        scores: ``Q K^T`` for every head.
        weighted_sum: ``weights @ V`` for every head.
        out_proj: ``Concat(heads) @ W^O``.
        bias: one addition per output element of each biased projection.
        scale: one multiplication per score (``scores * 1/sqrt(Dh)``).
        softmax: per row of S scores, ``S - 1`` comparisons (max), ``S`` subtractions,
            ``S`` exponentials, ``S - 1`` additions (sum) and ``S`` divisions.

    Raises:
        ValueError: if a count is negative.
        TypeError: if a count is not an int (a Python or NumPy integer, kept as a Python
            ``int``; not a bool).
    """

    q_proj: int
    k_proj: int
    v_proj: int
    scores: int
    weighted_sum: int
    out_proj: int
    bias: int
    scale: int
    softmax: int

    @property
    def projections(self) -> int:
        """FLOPs of the query, key and value projections."""
        return self.q_proj + self.k_proj + self.v_proj

    @property
    def attention(self) -> int:
        """FLOPs of the two per-head matrix products (scores and weighted sum)."""
        return self.scores + self.weighted_sum

    @property
    def matmul(self) -> int:
        """All matrix-multiply FLOPs: what ``FlopCounterMode`` reports."""
        return self.projections + self.attention + self.out_proj

    @property
    def elementwise(self) -> int:
        """Bias, scaling and softmax operations, which ``FlopCounterMode`` does not count."""
        return self.bias + self.scale + self.softmax

    @property
    def total(self) -> int:
        """Matrix-multiply FLOPs plus element-wise operations."""
        return self.matmul + self.elementwise

    def as_dict(self) -> dict[str, int]:
        """Every stage and every total, by name.

        Returns:
            ``{name: FLOPs}`` for the nine stages and the five totals.
        """
        out = asdict(self)
        for name in ("projections", "attention", "matmul", "elementwise", "total"):
            out[name] = getattr(self, name)
        return out


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of one ``(m, k) @ (k, n)`` matrix product: ``2 m k n`` (a multiply-add is 2).

    Args:
        m: rows of the left factor.
        k: the shared dimension.
        n: columns of the right factor.

    Returns:
        ``2 * m * k * n``, a Python ``int`` (exact at any size).

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
    """
    m, k, n = arguments.counts(m=m, k=k, n=n).values()
    return 2 * m * k * n


def attention_flops(
    batch_size: int,
    q_len: int,
    kv_len: int,
    d_model: int,
    num_heads: int,
    *,
    bias: bool = True,
    num_kv_heads: int | None = None,
    form: str = "fused",
) -> AttentionFlops:
    """Exact FLOP count of one multi-head attention forward, per stage.

    For multi-head attention the count does not depend on the form (per-head loop, fused,
    packed or tiled): the same multiply-adds are grouped into fewer, larger matrix products.
    With ``num_kv_heads`` below ``num_heads`` the keys and values are projected to
    ``num_kv_heads`` heads shared by groups of query heads (grouped-query attention;
    ``num_kv_heads=1`` is multi-query attention), which shrinks ``k_proj``, ``v_proj`` and
    their biases, in every form but the per-head loop: that one projects the key and value
    block of each query head's group for the head itself, ``H`` projections of width ``Dh``,
    as many as multi-head attention.

    Args:
        batch_size: the batch size, B.
        q_len: query length L.
        kv_len: key/value length S (``S = L`` for self-attention).
        d_model: model width D.
        num_heads: number of query heads H; must divide D.
        bias: whether the four projections add a bias.
        num_kv_heads: number of key/value heads; must divide H. Defaults to H.
        form: ``"per_head"``, ``"fused"``, ``"packed"`` or ``"tiled"``, the form of
            :func:`mha.backends.torch_backend.multi_head_attention` (or NumPy's) counted.

    Returns:
        ``AttentionFlops``, of Python ints (exact at any size); with ``Dh = D / H`` and
        ``Dkv = num_kv_heads * Dh`` (``D`` in the per-head form): q_proj ``2 B L D D``,
        k_proj = v_proj ``2 B S D Dkv``, scores = weighted_sum ``2 B H L S Dh``, out_proj
        ``2 B L D D``.

    Raises:
        ValueError: if a size is not positive, H does not divide D, ``num_kv_heads``
            does not divide H, or ``form`` is unknown.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool) or
            ``bias`` is not a bool.
    """
    B, L, S = arguments.counts(batch_size=batch_size, q_len=q_len, kv_len=kv_len).values()
    D, H, G = arguments.layer_sizes(d_model, num_heads, num_kv_heads, high=None)
    arguments.check_bool("bias", bias)
    layer.check_form(form)
    Dh = D // H
    Dkv = (H if form == "per_head" else G) * Dh  # the per-head loop projects per query head
    rows = B * H * L  # softmax rows
    return AttentionFlops(
        q_proj=matmul_flops(B * L, D, D),
        k_proj=matmul_flops(B * S, D, Dkv),
        v_proj=matmul_flops(B * S, D, Dkv),
        scores=B * H * matmul_flops(L, Dh, S),
        weighted_sum=B * H * matmul_flops(L, S, Dh),
        out_proj=matmul_flops(B * L, D, D),
        bias=(B * L * D + 2 * B * S * Dkv + B * L * D) if bias else 0,
        scale=rows * S,
        softmax=rows * (5 * S - 2),
    )


def matmul_calls(num_heads: int, form: str, *, self_attention: bool = True) -> int:
    """Matrix products one :func:`mha.backends.torch_backend.multi_head_attention` call dispatches.

    Counted for ``need_weights=True`` (explicit scores): the per-head form runs 3 input
    projections and 2 attention products per head, then one output projection
    (``5H + 1``); the fused form runs 3 + 2 + 1 = 6; the packed form projects queries,
    keys and values with one product in self-attention (4 in all) and with two when the
    query differs from the shared key/value tensor (5 in all).

    Args:
        num_heads: number of heads H.
        form: ``"per_head"``, ``"fused"`` or ``"packed"``.
        self_attention: whether query, key and value are one tensor (the packed form then
            projects them with one product).

    Returns:
        The number of matrix-multiply operators, an ``int``.

    Raises:
        ValueError: on an unknown form, on ``"tiled"`` (which forms no weights, and whose
            products depend on its block sizes), or a non-positive ``num_heads``.
        TypeError: if ``num_heads`` is not an int (a Python or NumPy integer, not a bool)
            or ``self_attention`` is not a bool.
    """
    num_heads = arguments.size("num_heads", num_heads, high=None)
    layer.check_form(form)
    arguments.check_bool("self_attention", self_attention)
    if form == "tiled":
        raise ValueError(
            "form='tiled' has no explicit scores to count (it never forms the weights, and its "
            "products depend on its block sizes); pass 'per_head', 'fused' or 'packed'"
        )
    if form == "per_head":
        return 5 * num_heads + 1
    if form == "fused":
        return 6
    return 4 if self_attention else 5


# --- Memory ------------------------------------------------------------------------------


def itemsize(dtype: Any) -> int:
    """Bytes of one element of a numeric NumPy or PyTorch dtype (``n_byte`` in the book).

    Args:
        dtype: a numeric NumPy or PyTorch dtype, or anything ``numpy.dtype`` accepts that is
            numeric (not ``bool``).

    Returns:
        The element's size in bytes, a Python ``int``.

    Raises:
        TypeError: if ``dtype`` is not a numeric dtype (``None`` and ``bool`` included).
    """
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        if str(dtype) == "torch.bool":
            raise TypeError(f"dtype must be a numeric dtype; got {dtype}")
        return int(dtype.itemsize)
    try:
        np_dtype = None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError):
        np_dtype = None
    if np_dtype is None or np_dtype.kind not in "iufc":
        raise TypeError(
            f"dtype must be a numeric NumPy or PyTorch dtype; got {arguments.describe(dtype)}"
        )
    return int(np_dtype.itemsize)


def score_tensor_bytes(
    batch_size: int, q_len: int, kv_len: int, num_heads: int, dtype: Any = np.float32
) -> int:
    """Bytes of one ``(B, H, L, S)`` score (or weight) tensor: ``B H L S`` times the item size.

    An explicit implementation holds at least one such tensor (the scores, overwritten by the
    weights); two at once when autograd records, since the backward pass needs the softmax's
    output. ``scaled_dot_product_attention``'s fused CPU kernel works on blocks of
    queries and keys and never stores it.

    Args:
        batch_size: the batch size, B.
        q_len: query length L.
        kv_len: key/value length S.
        num_heads: number of heads H.
        dtype: a NumPy or PyTorch dtype, or anything ``numpy.dtype`` accepts (float32 by
            default).

    Returns:
        ``B * H * L * S * itemsize``, a Python ``int`` (exact at any size).

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool) or
            ``dtype`` is not a numeric dtype (``None`` included).
    """
    B, L, S, H = arguments.counts(
        batch_size=batch_size, q_len=q_len, kv_len=kv_len, num_heads=num_heads
    ).values()
    return B * H * L * S * itemsize(dtype)


# --- Inference: the key/value cache and one decoding step ----------------------------------


def kv_cache_bytes(
    num_layers: int,
    kv_len: int,
    num_kv_heads: int,
    d_head: int,
    dtype: Any = np.float16,
    *,
    batch_size: int = 1,
) -> int:
    """Bytes of a key/value cache: ``2 * layers * B * S * H_kv * Dh`` times the item size.

    The 2 counts keys and values; each layer caches its own. Multi-query attention
    (``H_kv = 1``) and grouped-query attention (``1 < H_kv < H``) shrink the cache by
    ``H / H_kv`` against multi-head attention (``H_kv = H``).

    Args:
        num_layers: attention layers of the model.
        kv_len: S, the positions cached.
        num_kv_heads: H_kv.
        d_head: Dh.
        dtype: the cache's dtype (NumPy or PyTorch).
        batch_size: B, the sequences decoded together.

    Returns:
        The size in bytes, a Python ``int`` (exact at any size).

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool) or
            ``dtype`` is not a numeric dtype (``None`` included).
    """
    n = arguments.counts(
        num_layers=num_layers,
        kv_len=kv_len,
        num_kv_heads=num_kv_heads,
        d_head=d_head,
        batch_size=batch_size,
    )
    return 2 * math.prod(n.values()) * itemsize(dtype)


@dataclass(frozen=True)
class PublishedConfig:
    """The attention sizes of a published model, from its released configuration.

    Attributes:
        name: the model.
        num_layers: attention layers.
        num_heads: H, query heads per layer.
        num_kv_heads: H_kv, key/value heads per layer.
        d_head: Dh.
        d_ff: the width of each layer's gated feed-forward block (``intermediate_size``).
        vocab_size: tokens in the vocabulary (untied input and output embeddings).
        max_context: the longest context the model was built for, in tokens.
        window: the sliding-window length of its attention, whose rolling cache never
            holds more positions; ``None`` when every position attends to all before it.
        source: the citation key of the paper that describes the model.
        config_url: the released ``config.json`` the sizes come from.

    Raises:
        ValueError: if a size is not positive or ``num_kv_heads`` does not divide
            ``num_heads``.
        TypeError: if a size is not an int (a Python or NumPy integer, kept as a Python
            ``int``; not a bool), or a name is not a string.
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    d_head: int
    d_ff: int
    vocab_size: int
    max_context: int
    window: int | None
    source: str
    config_url: str

    def __post_init__(self) -> None:
        for name in ("name", "source", "config_url"):
            arguments.text(name, getattr(self, name))
        for name in ("num_layers", "num_heads", "num_kv_heads", "d_head", "d_ff"):
            object.__setattr__(self, name, arguments.size(name, getattr(self, name), high=None))
        for name in ("vocab_size", "max_context"):
            object.__setattr__(self, name, arguments.size(name, getattr(self, name), high=None))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads must divide num_heads; got num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.window is not None:
            object.__setattr__(self, "window", arguments.size("window", self.window, high=None))

    @property
    def d_model(self) -> int:
        """D, the model width: ``H Dh`` for every model listed here."""
        return self.num_heads * self.d_head

    def num_params(self) -> int:
        """Parameters of the Llama-style decoder these sizes describe.

        Each layer has the query and output projections (``D x D`` each), the key and value
        projections (``D x H_kv Dh`` each), a gated feed-forward block (three ``D x d_ff``
        matrices) and two RMSNorm weights (``D`` each), none with biases; the model adds the
        input and output embeddings (``vocab_size x D`` each) and a final norm. The count
        matches the published totals (6.7B for Llama 2 7B, 7.2B for Mistral 7B).

        Returns:
            The number of parameters.
        """
        D, kv = self.d_model, self.num_kv_heads * self.d_head
        per_layer = 2 * D * D + 2 * D * kv + 3 * D * self.d_ff + 2 * D
        return self.num_layers * per_layer + 2 * self.vocab_size * D + D

    def weight_bytes(self, dtype: Any = np.float16) -> int:
        """Bytes of all the weights, the data a decoding step reads once whatever the batch.

        Args:
            dtype: the weights' dtype.

        Returns:
            ``num_params() * itemsize``.

        Raises:
            TypeError: if ``dtype`` is not a dtype.
        """
        return self.num_params() * itemsize(dtype)

    def cache_bytes(self, kv_len: int, dtype: Any = np.float16, *, batch_size: int = 1) -> int:
        """Bytes of the key/value cache after ``kv_len`` tokens, at :meth:`cache_positions`.

        Args:
            kv_len: tokens seen.
            dtype: the cache's dtype.
            batch_size: the batch size, B.

        Returns:
            :func:`kv_cache_bytes` at ``cache_positions(kv_len)`` positions.

        Raises:
            ValueError: if ``kv_len`` or ``batch_size`` is not positive.
            TypeError: if a size is not an int or ``dtype`` is not a dtype.
        """
        return kv_cache_bytes(
            self.num_layers,
            self.cache_positions(kv_len),
            self.num_kv_heads,
            self.d_head,
            dtype,
            batch_size=batch_size,
        )

    def cache_outweighs_weights_at(self, dtype: Any = np.float16) -> int | None:
        """The first context at which one sequence's cache holds more bytes than the weights.

        Args:
            dtype: the dtype of weights and cache.

        Returns:
            The least ``S`` with ``cache_bytes(S) > weight_bytes()``, which may pass the
            model's ``max_context``; ``None`` if no context gets there because a sliding
            window's rolling cache stops growing first.

        Raises:
            TypeError: if ``dtype`` is not a dtype.
        """
        per_token = self.cache_bytes(1, dtype)
        S = self.weight_bytes(dtype) // per_token + 1  # the least S with S * per_token > W
        return S if self.window is None or self.window >= S else None

    def cache_positions(self, kv_len: int) -> int:
        """Positions the cache holds after ``kv_len`` tokens: all, or the window's.

        Args:
            kv_len: tokens seen.

        Returns:
            ``min(kv_len, window)``, or ``kv_len`` without a window.

        Raises:
            ValueError: if ``kv_len`` is not positive.
            TypeError: if ``kv_len`` is not an int (a Python or NumPy integer, not a bool).
        """
        kv_len = arguments.size("kv_len", kv_len, high=None)
        return kv_len if self.window is None else min(kv_len, self.window)


_HUB = "https://huggingface.co/{}/blob/main/config.json"
# From each model's released config.json: num_hidden_layers, num_attention_heads,
# num_key_value_heads, hidden_size / num_attention_heads (head_dim), intermediate_size,
# vocab_size, max_position_embeddings
# (Mistral 7B: the paper's context and window, Table 1).
PUBLISHED_CONFIGS = (
    PublishedConfig(
        "Llama 2 7B",
        32,
        32,
        32,
        128,
        11008,
        32000,
        4096,
        None,
        "touvron2023llama",
        _HUB.format("meta-llama/Llama-2-7b-hf"),
    ),
    PublishedConfig(
        "Llama 2 70B",
        80,
        64,
        8,
        128,
        28672,
        32000,
        4096,
        None,
        "touvron2023llama",
        _HUB.format("meta-llama/Llama-2-70b-hf"),
    ),
    PublishedConfig(
        "Mistral 7B",
        32,
        32,
        8,
        128,
        14336,
        32000,
        8192,
        4096,
        "jiang2023mistral",
        _HUB.format("mistralai/Mistral-7B-v0.1"),
    ),
    PublishedConfig(
        "Llama 3.1 8B",
        32,
        32,
        8,
        128,
        14336,
        128256,
        131072,
        None,
        "grattafiori2024llama",
        _HUB.format("meta-llama/Llama-3.1-8B"),
    ),
    PublishedConfig(
        "TinyLlama 1.1B",
        22,
        32,
        4,
        64,
        5632,
        32000,
        2048,
        None,
        "zhang2024tinyllama",
        _HUB.format("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"),
    ),
)


@dataclass(frozen=True)
class DecodeStepCost:
    """FLOPs and the least bytes moved by one attention layer for one new token per sequence.

    Attributes:
        flops: multiply-adds of the matrix products, 2 FLOPs each.
        bytes: the least traffic between memory and the processor: every weight read
            once, the cached keys and values read once, the new ones written once, and the
            layer's input and output.

    Raises:
        ValueError: if ``flops`` is negative or ``bytes`` is not positive.
        TypeError: if either is not an int (a Python or NumPy integer, not a bool).
    """

    flops: int
    bytes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "flops", arguments.size("flops", self.flops, 0, None))
        object.__setattr__(self, "bytes", arguments.size("bytes", self.bytes, 1, None))

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes


@dataclass(frozen=True)
class Accelerator:
    """The two numbers of a roofline: peak arithmetic and memory bandwidth.

    Attributes:
        name: the device and the precision the peak is for.
        peak_flops: FLOPs per second at peak (dense matrix products).
        bandwidth: bytes per second between main memory and the processor.
        source: the citation key of the datasheet.

    Raises:
        ValueError: if a rate is not positive and finite.
        TypeError: if a rate is not a real number or a name not a string.
    """

    name: str
    peak_flops: float
    bandwidth: float
    source: str

    def __post_init__(self) -> None:
        for name in ("name", "source"):
            arguments.text(name, getattr(self, name))
        for name in ("peak_flops", "bandwidth"):
            value = arguments.number(name, getattr(self, name), low=0.0, open_low=True)
            object.__setattr__(self, name, value)

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which compute and memory take equally long."""
        return self.peak_flops / self.bandwidth


# NVIDIA's A100 datasheet: 312 TFLOPS dense FP16/BF16 Tensor Core; 2,039 GB/s (80 GB SXM).
A100_80GB = Accelerator("A100 80GB SXM, float16", 312e12, 2039e9, "nvidia2020a100")


@dataclass(frozen=True)
class RooflineTime:
    """The least time of some work on an accelerator, from its FLOPs and its bytes.

    Attributes:
        compute: seconds to do the FLOPs at peak.
        memory: seconds to move the bytes at full bandwidth.

    Raises:
        ValueError: if a time is negative or not finite.
        TypeError: if a time is not a real number.
    """

    compute: float
    memory: float

    def __post_init__(self) -> None:
        for name in ("compute", "memory"):
            object.__setattr__(self, name, arguments.number(name, getattr(self, name), low=0.0))

    @property
    def seconds(self) -> float:
        """The roofline time, ``max(compute, memory)``: the two overlap at best."""
        return max(self.compute, self.memory)

    @property
    def bound(self) -> str:
        """``"memory"`` or ``"compute"``: which of the two sets the time."""
        return "memory" if self.memory >= self.compute else "compute"


def roofline_time(work: DecodeStepCost, accelerator: Accelerator) -> RooflineTime:
    """The roofline model: ``time = max(FLOPs / peak, bytes / bandwidth)``.

    Args:
        work: FLOPs and bytes, e.g. from :func:`decode_step_cost`.
        accelerator: the device.

    Returns:
        A :class:`RooflineTime`.

    Raises:
        TypeError: if ``work`` is not a :class:`DecodeStepCost` or ``accelerator`` not an
            :class:`Accelerator`.
    """
    if not isinstance(work, DecodeStepCost):
        raise TypeError(f"work must be a DecodeStepCost; got {type(work).__name__}")
    if not isinstance(accelerator, Accelerator):
        raise TypeError(f"accelerator must be an Accelerator; got {type(accelerator).__name__}")
    return RooflineTime(
        compute=work.flops / accelerator.peak_flops, memory=work.bytes / accelerator.bandwidth
    )


def decode_step_cost(
    d_model: int,
    num_heads: int,
    num_kv_heads: int,
    kv_len: int,
    dtype: Any = np.float16,
    *,
    batch_size: int = 1,
    cached: bool = True,
) -> DecodeStepCost:
    """What one attention layer costs to produce the next token, with or without a cache.

    The new token of each sequence attends to ``S = kv_len`` positions: itself and the
    ``S - 1`` before it. With a cache (``cached=True``), the new token is projected
    (``4 D^2 + 4 D H_kv Dh`` FLOPs: queries, keys and values of width ``H Dh = D``,
    ``H_kv Dh`` and ``H_kv Dh``, and the output) and attends to the ``S - 1`` cached
    positions and itself (``4 H S Dh``). Without one, the layer runs again on all ``S``
    tokens, ``L = S``: ``S (4 D^2 + 4 D H_kv Dh) + 4 H S^2 Dh``, the cost of a full forward
    (the explicit score matrix is dense even under a causal mask), which is also the cost of
    a prefill of ``S`` tokens.

    Bytes: the weights (``2 D^2 + 2 D H_kv Dh`` elements) are read once per step whatever
    ``B``; with a cache the ``2 B (S - 1) H_kv Dh`` cached elements are read and
    ``2 B H_kv Dh`` written; without one the ``B S D`` inputs are read and the same outputs
    written. So a cached step reads every cached element for about ``4 H / H_kv`` FLOPs: its
    intensity is set by ``H / H_kv``, which is why multi-query and grouped-query attention
    speed up memory-bound decoding.

    Args:
        d_model: the model width, D.
        num_heads: H; must divide D.
        num_kv_heads: H_kv; must divide H.
        kv_len: S, the key/value length: the positions the new token attends to, itself
            included (``S - 1`` of them cached before the step).
        dtype: the dtype of weights and cache.
        batch_size: the batch size, B.
        cached: whether the keys and values of the ``S - 1`` earlier positions come from a
            cache.

    Returns:
        A :class:`DecodeStepCost`.

    Raises:
        ValueError: if a size is not positive, H does not divide D or H_kv does not
            divide H.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool),
            ``cached`` is not a bool, or ``dtype`` is not a numeric dtype.
    """
    arguments.size("num_kv_heads", num_kv_heads, high=None)  # required: None is not H here
    D, H, H_kv = arguments.layer_sizes(d_model, num_heads, num_kv_heads, high=None)
    S, B = arguments.counts(kv_len=kv_len, batch_size=batch_size).values()
    arguments.check_bool("cached", cached)
    Dh = D // H
    item = itemsize(dtype)
    per_token = 4 * D * D + 4 * D * H_kv * Dh  # q, k, v and output projections
    weights = 2 * D * D + 2 * D * H_kv * Dh
    if cached:
        flops = B * (per_token + 4 * H * S * Dh)
        moved = weights + 2 * B * (S - 1) * H_kv * Dh + 2 * B * H_kv * Dh + 2 * B * D
    else:
        flops = B * (S * per_token + 4 * H * S * S * Dh)
        moved = weights + 2 * B * S * D
    return DecodeStepCost(flops=flops, bytes=moved * item)
