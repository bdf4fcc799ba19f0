"""General tools that any module may use: running on one CPU thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_thread() -> Iterator[None]:
    """Run PyTorch on one CPU thread inside the block; restore the thread count after.

    Also usable as a decorator (``@one_thread()``).

    Yields:
        Nothing; the block runs with ``torch.get_num_threads() == 1``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
