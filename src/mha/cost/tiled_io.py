"""The IO model of tiled attention: element transfers between slow and fast memory.

:func:`tiled_attention_io` counts the reads and writes of the tiled form for given block
sizes (:func:`tiled_block_sizes` picks them from a fast-memory size,
:func:`tiled_fast_memory` the size they need), :func:`naive_attention_io` those of the form
that writes the ``(L, S)`` scores, and :func:`flash_io_bound` the asymptotic bound of Dao et
al. (2022). :mod:`mha.backends.tiled` counts the same transfers while it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mha.core._checks import arguments
from mha.cost._counts import Counts


@dataclass(frozen=True)
class AttentionIO(Counts):
    """Elements one attention head moves between slow memory and fast memory.

    "Slow" memory holds the inputs and outputs (a GPU's HBM, a CPU's main memory); "fast"
    memory holds the tiles being worked on (on-chip SRAM, a cache) and has room for
    ``fast_memory`` elements. Counts are elements, not bytes.

    Attributes:
        reads: elements loaded from slow memory.
        writes: elements stored to slow memory.

    Raises:
        ValueError: if ``reads`` or ``writes`` is negative.
        TypeError: if either is not an int (a Python or NumPy integer, kept as a Python
            ``int``; not a bool).
    """

    reads: int
    writes: int

    @property
    def total(self) -> int:
        """Reads plus writes."""
        return self.reads + self.writes


def tiled_fast_memory(block_q: int, block_kv: int, d_head: int) -> int:
    """Elements the tiled forward holds in fast memory at once, per head.

    A query block and its output accumulator (``2 Br Dh``), a key and a value block
    (``2 Bc Dh``), one tile of scores (``Br Bc``), and the running maximum and sum (``2 Br``).

    Args:
        block_q: Br, query rows per tile.
        block_kv: Bc, key/value rows per tile.
        d_head: Dh.

    Returns:
        ``2 Br Dh + 2 Bc Dh + Br Bc + 2 Br`` elements.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
    """
    block_q, block_kv, d_head = arguments.counts(
        block_q=block_q, block_kv=block_kv, d_head=d_head
    ).values()
    return 2 * block_q * d_head + 2 * block_kv * d_head + block_q * block_kv + 2 * block_q


def tiled_block_sizes(d_head: int, fast_memory: int) -> tuple[int, int]:
    """The block sizes ``(Br, Bc)`` that the IO model uses for a fast memory of M elements.

    The key/value block is ``Bc = min(Dh, M // (4 Dh))`` (at least 1): ``Bc = Dh`` once
    ``M >= 4 Dh^2``, so that the score tile ``(Br, Bc)`` takes no more room than the query
    block ``(Br, Dh)``. The query block ``Br`` is then the largest for which
    :func:`tiled_fast_memory` fits in M:

        ``Br = floor((M - 2 Bc Dh) / (2 Dh + Bc + 2))``, i.e.
        ``floor((M - 2 Dh^2) / (3 Dh + 2))`` when ``Bc = Dh``.

    The outer (query) block is the large one, because the inner blocks are read once per
    outer block; FlashAttention (Dao et al., 2022) makes the same choice with its loops the
    other way round.

    Args:
        d_head: Dh.
        fast_memory: M, in elements.

    Returns:
        ``(Br, Bc)``.

    Raises:
        ValueError: if a size is not positive, or M is too small for one row of each block
            (``M < tiled_fast_memory(1, 1, Dh)``).
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
    """
    d_head, fast_memory = arguments.counts(d_head=d_head, fast_memory=fast_memory).values()
    block_kv = max(1, min(d_head, fast_memory // (4 * d_head)))
    block_q = (fast_memory - 2 * block_kv * d_head) // (2 * d_head + block_kv + 2)
    if block_q < 1:
        raise ValueError(
            f"fast_memory must hold at least one row of each block, "
            f"{tiled_fast_memory(1, 1, d_head)} elements for d_head={d_head}; "
            f"got fast_memory={fast_memory}"
        )
    return block_q, block_kv


def _io_blocks(
    d_head: int, fast_memory: int | None, blocks: tuple[int, int] | None
) -> tuple[int, int]:
    if (fast_memory is None) == (blocks is None):
        raise ValueError(
            f"give exactly one of fast_memory and blocks; got fast_memory={fast_memory}, "
            f"blocks={blocks}"
        )
    if fast_memory is not None:  # and so blocks is None
        return tiled_block_sizes(d_head, fast_memory)
    if not isinstance(blocks, tuple | list) or len(blocks) != 2:
        raise TypeError(f"blocks must be a pair (Br, Bc); got {arguments.describe(blocks)}")
    block_q, block_kv = blocks
    return arguments.size("blocks[0]", block_q, high=None), arguments.size(
        "blocks[1]", block_kv, high=None
    )


def tiled_attention_io(
    q_len: int,
    kv_len: int,
    d_head: int,
    fast_memory: int | None = None,
    *,
    blocks: tuple[int, int] | None = None,
    causal: bool = False,
) -> AttentionIO:
    """Exact element count of one head of :func:`mha.backends.tiled.attention` (``Dv = Dh``).

    Each of the ``ceil(L / Br)`` query blocks is read once and reads every key and value
    block (with ``causal``, only the blocks that start at or before its last row); the
    output and the log-sum-exp are written once:

        reads ``= L Dh + 2 Dh sum_i (key rows read by block i)``, writes ``= L Dh + L``.

    Without a mask that is ``2 L Dh + L + 2 ceil(L / Br) S Dh`` in all. With the blocks of
    :func:`tiled_block_sizes` (``Bc = Dh``, ``Br = floor((M - 2 Dh^2) / (3 Dh + 2))``) its
    ratio to ``L S Dh^2 / M`` (:func:`flash_io_bound`, the order of Dao et al., 2022,
    Theorem 2) is about ``6 (1 + 2 / (3 Dh)) M / (M - 2 Dh^2)`` plus the rounding up of
    ``L / Br``: it tends to 6 when ``M >> Dh^2`` and ``L >> Br``, and is about 7 to 10 for
    ``8 Dh^2 <= M <= N Dh`` at ``N = 4096``, ``Dh = 64`` (more for smaller M, where the
    ``2 Dh^2`` of the key and value blocks take much of the fast memory).

    Args:
        q_len: the query length, L.
        kv_len: the key/value length, S.
        d_head: Dh.
        fast_memory: M, in elements; the blocks come from :func:`tiled_block_sizes`.
        blocks: ``(Br, Bc)`` instead of ``fast_memory``.
        causal: query ``i`` attends to keys ``j <= i`` and tiles above the diagonal are
            skipped.

    Returns:
        The :class:`AttentionIO` of the tiled forward.

    Raises:
        ValueError: if a size is not positive, or not exactly one of ``fast_memory`` and
            ``blocks`` is given.
        TypeError: if a size is not an int, ``blocks`` is not a pair, or ``causal`` is not
            a bool.
    """
    q_len, kv_len, d_head = arguments.counts(q_len=q_len, kv_len=kv_len, d_head=d_head).values()
    arguments.check_bool("causal", causal)
    block_q, block_kv = _io_blocks(d_head, fast_memory, blocks)
    key_rows = _key_rows_read(q_len, kv_len, block_q, block_kv, causal)
    return AttentionIO(reads=q_len * d_head + 2 * d_head * key_rows, writes=q_len * d_head + q_len)


def _key_rows_read(L: int, S: int, Br: int, Bc: int, causal: bool) -> int:
    """Key rows the ``ceil(L / Br)`` query blocks read, in closed form (any size, exact).

    Block ``i`` ends at ``stop_i = min((i + 1) Br, L)`` and reads the key blocks that start
    before ``seen_i = min(stop_i, S)`` (all S keys without a mask): ``min(S, Bc
    ceil(seen_i / Bc))`` rows. The full blocks that stop before the last key block,
    ``(i + 1) Br <= T = Bc (ceil(S / Bc) - 1)``, read ``Bc ceil((i + 1) Br / Bc)`` rows, a
    sum of floors (:func:`_floor_sum`); the other full blocks read all S; then the last one.
    """
    blocks = -(-L // Br)
    if not causal:
        return blocks * S
    T = Bc * (-(-S // Bc) - 1)
    k = min(blocks - 1, T // Br)  # full blocks that stop before the last key block
    early = Bc * _floor_sum(k, Bc, Br, Br + Bc - 1)  # Bc sum_{j=1..k} ceil(j Br / Bc)
    seen = min(L, S)
    return early + (blocks - 1 - k) * S + min(S, Bc * -(-seen // Bc))


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum_{i=0}^{n-1} floor((a i + b) / m)`` for ``n >= 0``, ``m >= 1``, ``a, b >= 0``.

    Exact in ``O(log(m + a))`` steps: the lattice points under a line, counted by swapping
    the roles of the axes (Euclid's algorithm), as competitive-programming libraries do.
    """
    total = 0
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return total
        n, b, m, a = y_max // m, y_max % m, a, m


def naive_attention_io(
    q_len: int,
    kv_len: int,
    d_head: int,
    fast_memory: int | None = None,
    *,
    blocks: tuple[int, int] | None = None,
    softmax_rows: int | None = None,
) -> AttentionIO:
    """Exact element count of one head of :func:`mha.backends.tiled.three_pass_attention`.

    ``Dv = Dh``.

    Standard attention with its two matrix products done in the tiles of the tiled
    algorithm, plus the materialisation of the scores and weights. Pass 1 reads Q once and
    K once per query block and writes the ``L S`` scores; pass 2 reads them, once when a
    block of whole rows fits in fast memory (``softmax_rows``; from ``fast_memory``,
    :func:`naive_softmax_rows`: ``M // (S + 2)`` rows, each with its maximum and sum) or when
    one tile spans a row (``Bc >= S``), twice otherwise (statistics, then weights), and
    writes the ``L S`` weights; pass 3 reads the weights and V once per query block and
    writes the output. So it is :func:`tiled_attention_io` (no mask) plus exactly
    ``4 L S - L`` elements (``5 L S - L`` when the scores are read twice): the tiled count's
    re-reading of K and V, ``2 ceil(L / Br) S Dh``, is shared. Standard attention's
    ``Theta(N d + N^2)`` of Dao et al. (2022), Theorem 2, holds when that shared term is at
    most of order ``N^2``, i.e. ``M`` of order ``Dh^2`` or more; with a smaller fast memory
    the products themselves dominate both counts.

    Args:
        q_len: the query length, L.
        kv_len: the key/value length, S.
        d_head: Dh.
        fast_memory: M, in elements; the blocks come from :func:`tiled_block_sizes` and the
            softmax rows from M.
        blocks: ``(Br, Bc)`` instead of ``fast_memory``.
        softmax_rows: with ``blocks``, the rows per block of the softmax pass (``None``: the
            tiles), as in :func:`mha.backends.tiled.three_pass_attention`.

    Returns:
        The reads and writes of the three passes, an :class:`AttentionIO`.

    Raises:
        ValueError: if a size is not positive, not exactly one of ``fast_memory`` and
            ``blocks`` is given, or ``softmax_rows`` is given with ``fast_memory``.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool), or
            ``blocks`` is not a pair.
    """
    q_len, kv_len, d_head = arguments.counts(q_len=q_len, kv_len=kv_len, d_head=d_head).values()
    block_q, block_kv = _io_blocks(d_head, fast_memory, blocks)
    if softmax_rows is not None:
        if fast_memory is not None:
            raise ValueError(
                f"softmax_rows goes with blocks, not fast_memory (it follows from M); got "
                f"fast_memory={fast_memory}, softmax_rows={softmax_rows}"
            )
        softmax_rows = arguments.size("softmax_rows", softmax_rows, high=None)
    L, S, Dh = q_len, kv_len, d_head
    if fast_memory is not None:
        softmax_rows = naive_softmax_rows(S, fast_memory)
    rows_fit = softmax_rows is not None
    passes_over_scores = 1 if rows_fit or block_kv >= S else 2
    q_blocks = math.ceil(L / block_q)
    reads = (L * Dh + q_blocks * S * Dh) + passes_over_scores * L * S + (L * S + q_blocks * S * Dh)
    return AttentionIO(reads=reads, writes=L * S + L * S + L * Dh)


def naive_softmax_rows(kv_len: int, fast_memory: int) -> int | None:
    """Rows of scores the standard algorithm's softmax pass holds at once: ``M // (S + 2)``.

    Args:
        kv_len: the key/value length, S.
        fast_memory: M, in elements.

    Returns:
        The number of whole rows (with their maximum and sum) that fit in M, or ``None``
        when not even one does (then the softmax goes tile by tile and reads each score
        twice).

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
    """
    kv_len, fast_memory = arguments.counts(kv_len=kv_len, fast_memory=fast_memory).values()
    rows = fast_memory // (kv_len + 2)
    return rows if rows >= 1 else None


def flash_io_bound(q_len: int, kv_len: int, d_head: int, fast_memory: int) -> float:
    """``L S Dh^2 / M``: the order of FlashAttention's slow-memory traffic, without a constant.

    Dao et al. (2022), Theorem 2, state ``Theta(N^2 d^2 M^-1)`` for ``L = S = N``,
    ``Dh = d``, ``d <= M <= N d``.

    Args:
        q_len: the query length, L.
        kv_len: the key/value length, S.
        d_head: Dh.
        fast_memory: M, in elements.

    Returns:
        ``L S Dh^2 / M``, a float (the quotient of exact integers, rounded once).

    Raises:
        ValueError: if a size is not positive, or the bound exceeds a float's range.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
    """
    L, S, Dh, M = arguments.counts(
        q_len=q_len, kv_len=kv_len, d_head=d_head, fast_memory=fast_memory
    ).values()
    try:
        return L * S * Dh**2 / M
    except OverflowError:
        raise ValueError(
            f"L S Dh^2 / M must fit a float; got q_len={L}, kv_len={S}, d_head={Dh}, "
            f"fast_memory={M}"
        ) from None
