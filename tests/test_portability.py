"""The portability run: unit tests again under other numerical kernels (see portability.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import background
import pytest
from portability import portable_env

pytestmark = pytest.mark.portability

PROBE = """
import json, numpy, torch
from numpy._core import _multiarray_umath as umath
print(json.dumps({
    "aten": torch.backends.cpu.get_cpu_capability(),
    "threads": torch.get_num_threads(),
    "numpy": [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)],
}))
"""


def test_portable_env_selects_other_kernels() -> None:
    """Guard the check itself: the variables must reach the libraries."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=portable_env(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen == {"aten": "DEFAULT", "threads": 1, "numpy": []}


def test_unit_tests_pass_under_portable_kernels() -> None:
    """Every unit, parity and property test, under PyTorch's and NumPy's portable kernels
    (``make test`` starts the run when the site is built: ``background.py``)."""
    returncode, output = background.unit_run().wait()
    assert returncode == 0, output[-12000:]
