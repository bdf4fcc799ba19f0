"""The package itself: ``import mha`` without PyTorch, the PyTorch names on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mha

WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # every `import torch` now raises ImportError
import numpy as np
import mha
from mha.cost import arithmetic
from mha.detectors import patterns
from mha.backends import np_backend
from mha.core import packing
from mha.display import shapes
from mha.numerics import tolerance
params = mha.init_params(8, 2, seed=0)
x = np.random.default_rng(0).standard_normal((1, 3, 8))
out, weights = np_backend.multi_head_attention(x, x, x, params, np_backend.causal_mask(3))
assert out.shape == (1, 3, 8) and weights.shape == (1, 2, 3, 3)
assert patterns.previous_token_score(weights[0]).shape == (2,)
assert packing.split_head_blocks(params.w_qkv, 2).shape == (3, 2, 8, 4)
assert arithmetic.attention_flops(1, 3, 3, 8, 2).matmul > 0
tolerance.assert_close(weights.sum(-1), np.ones((1, 2, 3)), 1e-12)
try:
    mha.MultiHeadAttention
except ImportError:
    print("torch names need torch")
"""


def test_import_mha_and_the_numpy_backend_work_without_torch() -> None:
    out = subprocess.run([sys.executable, "-c", WITHOUT_TORCH], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "torch names need torch"


def test_torch_names_load_on_first_access() -> None:
    from mha.backends import module, torch_backend

    assert mha.backends.torch_backend is torch_backend
    assert mha.MultiHeadAttention is module.MultiHeadAttention
    assert set(mha.__all__) <= set(dir(mha))
    with pytest.raises(AttributeError, match="module 'mha' has no attribute 'nothing'"):
        mha.nothing  # noqa: B018


def test_version_comes_from_one_place() -> None:
    from importlib.metadata import version

    assert mha.__version__ == version("mha")
