"""mha: multi-head attention, exact and tested, in NumPy and PyTorch.

The NumPy reference (:mod:`mha.np_backend`) and the PyTorch implementation
(:mod:`mha.torch_backend`) share function and argument names, so code switches backend
by changing one import::

    from mha import np_backend as backend  # or: from mha import torch_backend as backend
    out, weights = backend.multi_head_attention(x, x, x, params, mask)

(``F`` is kept for ``torch.nn.functional`` throughout the project.)

Shapes: inputs ``(B, L, D)`` and ``(B, S, D)``, per-head tensors ``(B, H, L, Dh)``,
weights ``(B, H, L, S)``. Masks are boolean, True = may attend.
"""

from mha import np_backend, tolerance, torch_backend
from mha.module import MultiHeadAttention, from_torch_mha, to_torch_attn_mask, to_torch_mha
from mha.params import MHAParams, init_params

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
__version__ = "0.1.0"
