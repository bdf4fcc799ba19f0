"""PyTorch's private ``torch.func`` names, looked up in one place, and reading values with them.

Inside ``torch.func.vmap`` or ``grad`` a tensor is a wrapper whose values the checks of
:mod:`mha.backends.torch_backend` cannot read directly; these helpers unwrap it through four
private names of PyTorch (:data:`FUNCTORCH_NAMES`), so that a PyTorch that renames one breaks
this module only, and ``functorch_internals`` names what is missing. (The package's other
private PyTorch names are :mod:`mha.cost.measure`'s ``TorchDispatchMode`` and the CPU
attention kernel whose FLOPs it counts; a test checks that they exist.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

# PyTorch's private names for reading the values inside torch.func's wrappers (vmap, grad),
# by the role each plays here; every use of them goes through functorch_internals.
FUNCTORCH_NAMES = {
    "is_wrapped": "torch._C._functorch.is_functorch_wrapped_tensor",
    "level": "torch._C._functorch.maybe_current_level",
    "unwrap": "torch._C._functorch.get_unwrapped",
    "disable": "torch._C._DisableFuncTorch",
}


def functorch_internals() -> SimpleNamespace:
    """The private ``torch.func`` names of ``FUNCTORCH_NAMES``, looked up in ``torch``.

    The one place where this package reads PyTorch's private ``torch.func`` names: a PyTorch
    that renames or removes one of them breaks reading values under ``torch.func`` transforms
    here, and nowhere else.

    Returns:
        A namespace with ``is_wrapped(x)``, ``level()`` (``None`` outside any transform),
        ``unwrap(x)`` and ``disable()`` (a context manager that suspends the transforms).

    Raises:
        ImportError: naming every one of the names this PyTorch lacks.
    """
    found, missing = {}, []
    for role, path in FUNCTORCH_NAMES.items():
        obj: Any = torch
        for part in path.split(".")[1:]:
            obj = getattr(obj, part, None)
        if obj is None:
            missing.append(path)
        found[role] = obj
    if missing:
        raise ImportError(
            f"torch {torch.__version__} lacks the private torch.func names that "
            "mha.backends.torch_backend reads values under vmap and grad with: "
            f"{', '.join(missing)}"
        )
    return SimpleNamespace(**found)


try:
    FUNCTORCH: SimpleNamespace | None = functorch_internals()
except ImportError:  # the tests name what is missing; here, tensors are read as plain ones
    FUNCTORCH = None


def wrapped(x: torch.Tensor) -> bool:
    """True for a tensor that ``torch.func.vmap`` or ``torch.func.grad`` wraps."""
    return FUNCTORCH is not None and FUNCTORCH.is_wrapped(x)


def in_transform() -> bool:
    """True inside a ``torch.func`` transform (``vmap``, ``grad``, ``jacrev``, ...)."""
    return FUNCTORCH is not None and FUNCTORCH.level() is not None


def values(x: torch.Tensor) -> torch.Tensor:
    """The plain tensor holding ``x``'s values (inside ``torch.func``'s wrappers, if any).

    Under ``vmap`` it holds the values of every vmapped slice, so a check of it checks them all.
    """
    while wrapped(x):
        x = FUNCTORCH.unwrap(x)
    return x
