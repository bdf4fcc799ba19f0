"""scripts/bench.py runs end to end and prints every ratio the performance targets name.

This checks the script's output, not the machine's speed: timings are never asserted in tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"


def test_bench_prints_ratios_targets_shares_and_peak_memory():
    args = ["--batch-size", "1", "--q-len", "16", "--d-model", "16", "--num-heads", "2"]
    args += ["--repeats", "2", "--memory-len", "64", "--peak-sizes", "16", "32"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    row = rf"\s+{number}\s+({number})\s+({number})\s+({number})\s+{number}\s+\d+%\s+"
    for name, targets in [
        ("mha torch fast path", r"ratio<=1\.00 (ok|MISS), native<=0\.85 (ok|MISS)"),
        ("mha torch with weights", r"weights<=1\.10 (ok|MISS)"),
        ("mha numpy", r"native<=1\.50 (ok|MISS)"),
    ]:
        assert re.search(rf"^{name}{row}{targets}$", out, re.M), f"no row for {name!r} in:\n{out}"
    assert re.search(rf"^nn.MultiheadAttention\s+{number}\s+1\.00\s", out, re.M)
    weights = rf"^nn.MultiheadAttention weights\s+{number}\s+{number}\s+1\.00\s"
    assert re.search(weights, out, re.M), out
    native = rf"^nn.MultiheadAttention native\s+{number}\s+{number}\s+{number}\s+1\.00\s"
    assert re.search(native, out, re.M), out
    share = re.search(rf"16\^3 ({number}), 32\^3 ({number}) GFLOP/s \(peak ({number}) GFLOP/s", out)
    assert share, out
    assert float(share[3]) == max(float(share[1]), float(share[2]))
    memory = re.search(r"peak extra memory .*: (\d+\.\d+) MiB; .* (\d+) MiB \(ratio", out)
    assert memory, out
