"""Numerical kernels other than this machine's defaults, for the portability runs.

Readers build the book on other CPUs, BLAS libraries and thread counts, where floating-point
sums are taken in other orders. The chapter tests and a second run of the unit tests use
:func:`portable_env`, while the site build keeps the machine's defaults, so every claim is
checked under two sets of kernels:

- ``ATEN_CPU_CAPABILITY=default``: PyTorch's portable kernels instead of its AVX2/AVX-512
  ones;
- ``MKL_ENABLE_INSTRUCTIONS=SSE4_2`` and ``ONEDNN_MAX_CPU_ISA=SSE41``: PyTorch's matrix
  products through MKL's and oneDNN's SSE code paths;
- ``NPY_DISABLE_CPU_FEATURES``: every SIMD extension NumPy dispatches to beyond its
  baseline, so its loops take their baseline code paths;
- one thread (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``) instead of
  one per core.

OpenBLAS's own kernel choice (``OPENBLAS_CORETYPE``) is left to the machine on purpose: the
project never sets it, so that no run hides behind one kernel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def numpy_dispatched_features() -> list[str]:
    """The SIMD extensions NumPy found on this CPU beyond its compiled baseline."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    found = umath.__cpu_features__
    return [name for name in umath.__cpu_dispatch__ if found.get(name)]


def portable_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the portable kernels selected."""
    env = dict(os.environ if base is None else base)
    env.update(
        ATEN_CPU_CAPABILITY="default",
        MKL_ENABLE_INSTRUCTIONS="SSE4_2",
        ONEDNN_MAX_CPU_ISA="SSE41",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
    )
    features = numpy_dispatched_features()
    if features:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(features)
    return env
