"""General tools that any module may use: running on one CPU thread, a switch for a block."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from mha.core._checks.arguments import check_bool


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


@contextmanager
def switched(setting: contextvars.ContextVar[bool], enabled: bool) -> Iterator[None]:
    """``setting`` set to ``enabled`` inside the block, for this thread (and task), and
    restored when the block ends, by an exception too.

    Yields:
        Nothing.

    Raises:
        TypeError: if ``enabled`` is not a bool.
    """
    check_bool("enabled", enabled)
    token = setting.set(enabled)
    try:
        yield
    finally:
        setting.reset(token)
