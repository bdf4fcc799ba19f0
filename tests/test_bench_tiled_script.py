"""scripts/bench_tiled.py runs end to end and prints every target it names.

This checks the script's output at small sizes, not the machine's speed: timings are never
asserted in tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mha.backends import tiled

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_tiled.py"


def test_bench_tiled_prints_memory_sweep_and_backward_targets():
    args = ["--memory-len", "256", "--d-model", "32", "--num-heads", "2", "--time-len", "64"]
    args += ["--blocks", "16x16,32x64", "--backward-shape", "1", "32", "32", "2"]
    args += ["--repeats", "2", "--min-time", "0.001"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    assert re.search(rf"^numpy tiled\s+{number}\s+{number}\s+<=1/16 (ok|MISS)$", out, re.M), out
    for path in ("numpy tiled backward", "sdpa", "numpy", "numpy backward"):
        assert re.search(rf"^{path}\s+{number}\s+{number}\s*$", out, re.M), (path, out)
    assert re.search(r"naive path needs \d+\.\d+ GiB .*; > 4 GiB (ok|MISS)$", out, re.M), out
    assert re.search(rf"^  naive with Q scaled and O divided once: {number} ms", out, re.M), out
    assert re.search(rf"^  PyTorch scaled_dot_product_attention: {number} ms", out, re.M), out
    causal = rf"\s+{number}\s+{number}"  # its time with causal=True, and over its own
    for blocks in ("16x16", "32x64"):
        assert re.search(rf"^tiled {blocks}\s+{number}\s+{number}{causal}$", out, re.M), out
    default = f"{tiled.DEFAULT_BLOCK_Q}x{tiled.DEFAULT_BLOCK_KV}"  # swept too, and marked
    assert re.search(rf"^tiled {default}\s+{number}\s+{number}{causal}  \(default\)$", out, re.M)
    assert re.search(
        rf"^best block size tiled \d+x\d+: {number}x naive; <=2.00 (ok|MISS)$", out, re.M
    )
    assert re.search(
        rf"^default blocks {default}: {number}x naive, {number}x the best; <=1.10 (ok|MISS)$",
        out,
        re.M,
    ), out
    assert re.search(
        rf"^causal=True at the default blocks: {number}x its time without; <=0.60 (ok|MISS)$",
        out,
        re.M,
    ), out
    backward = rf"^layer backward, fused\s+{number}\s+{number}\s+<=3.00 (ok|MISS)$"
    assert re.search(backward, out, re.M), out
    assert re.search(rf"^layer backward, tiled\s+{number}\s+{number}\s*$", out, re.M), out
