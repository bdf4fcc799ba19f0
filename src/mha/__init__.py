"""mha: multi-head attention, exact and tested, in NumPy and PyTorch.

The NumPy reference (:mod:`mha.backends.np_backend`) and the PyTorch implementation
(:mod:`mha.backends.torch_backend`) share function and argument names, so code switches
backend by changing one import::

    from mha.backends import np_backend as backend  # or: torch_backend as backend
    out, weights = backend.multi_head_attention(x, x, x, params, mask)

(``F`` is kept for ``torch.nn.functional`` throughout the project.)

Shapes: inputs ``(B, L, D)`` and ``(B, S, D)``, per-head tensors ``(B, H, L, Dh)``,
weights ``(B, H, L, S)``. Masks are boolean, True = may attend.

The package's folders are the groups of its API reference, each a layer that imports only
from the layers before it (``tests/test_layers.py`` checks this, function-level imports
included, and that no two modules import each other in a cycle):

1. :mod:`mha.core`: parameters, their packing, the key/value cache, the mask convention,
   rotary positions, and the private checks every other module shares;
2. :mod:`mha.backends`: the NumPy and PyTorch forwards (every ``form`` in NumPy, all but
   the tiled one in PyTorch) and the ``nn.Module``;
3. :mod:`mha.numerics`: tolerances (every error bound), rounding experiments, gradients by
   hand;
4. :mod:`mha.cost`: cost arithmetic (FLOPs, bytes, IO) and measurement (time, memory,
   operator counts);
5. :mod:`mha.detectors`: scores of attention patterns and of weight-based circuits;
6. :mod:`mha.analysis`: rank, subspaces and the low-rank bottleneck;
7. :mod:`mha.models`: models whose heads the book studies (MiniLM, SmolLM2, the
   attention-only transformer, the worked examples);
8. :mod:`mha.training`: tasks, training runs and their store, ablation and interpretation;
9. :mod:`mha.display`: tables, shapes and figures.

This module re-exports the names a reader needs first, and the chapters import them from
here. :class:`~mha.core.params.MHAParams` and :func:`~mha.core.params.init_params` need
only NumPy; the PyTorch names (``MultiHeadAttention`` and the converters) are imported on
first use, so ``import mha`` does not import PyTorch.
"""

from __future__ import annotations

import importlib
from typing import Any

from mha.core.params import MHAParams, init_params

__version__ = "0.1.0"

# name -> (module, attribute): imported on first access
_NEEDS_TORCH = {
    "MultiHeadAttention": ("mha.backends.module", "MultiHeadAttention"),
    "from_torch_mha": ("mha.backends.module", "from_torch_mha"),
    "to_torch_attn_mask": ("mha.backends.module", "to_torch_attn_mask"),
    "to_torch_mha": ("mha.backends.module", "to_torch_mha"),
}

__all__ = [
    "MHAParams",
    "MultiHeadAttention",
    "from_torch_mha",
    "init_params",
    "to_torch_attn_mask",
    "to_torch_mha",
]


def __getattr__(name: str) -> Any:
    """Import a PyTorch name of the package on first access (PEP 562)."""
    if name not in _NEEDS_TORCH:
        raise AttributeError(f"module 'mha' has no attribute {name!r}")
    module_name, attribute = _NEEDS_TORCH[name]
    value = getattr(importlib.import_module(module_name), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
