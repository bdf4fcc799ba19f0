"""mha: multi-head attention, exact and tested, in NumPy and PyTorch.

The NumPy reference (:mod:`mha.np_backend`) and the PyTorch implementation
(:mod:`mha.torch_backend`) share function and argument names, so code switches backend
by changing one import::

    from mha import np_backend as backend  # or: from mha import torch_backend as backend
    out, weights = backend.multi_head_attention(x, x, x, params, mask)

(``F`` is kept for ``torch.nn.functional`` throughout the project.)

Shapes: inputs ``(B, L, D)`` and ``(B, S, D)``, per-head tensors ``(B, H, L, Dh)``,
weights ``(B, H, L, S)``. Masks are boolean, True = may attend.

``import mha`` needs only NumPy: the parameters, the NumPy backend and the NumPy-only
modules (:mod:`mha.packing`, :mod:`mha.cost`, :mod:`mha.detectors`, :mod:`mha.shapes`,
:mod:`mha.tolerance`) work without PyTorch. The PyTorch names (``torch_backend``,
``MultiHeadAttention`` and the converters) are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from mha import np_backend, tolerance
from mha.params import MHAParams, init_params

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself): imported on first access
_NEEDS_TORCH = {
    "torch_backend": ("mha.torch_backend", None),
    "MultiHeadAttention": ("mha.module", "MultiHeadAttention"),
    "from_torch_mha": ("mha.module", "from_torch_mha"),
    "to_torch_attn_mask": ("mha.module", "to_torch_attn_mask"),
    "to_torch_mha": ("mha.module", "to_torch_mha"),
}

__all__ = [
    "MHAParams",
    "MultiHeadAttention",
    "from_torch_mha",
    "init_params",
    "np_backend",
    "to_torch_attn_mask",
    "to_torch_mha",
    "tolerance",
    "torch_backend",
]


def __getattr__(name: str) -> Any:
    """Import a PyTorch name of the package on first access (PEP 562)."""
    if name not in _NEEDS_TORCH:
        raise AttributeError(f"module 'mha' has no attribute {name!r}")
    module_name, attribute = _NEEDS_TORCH[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
