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
    args += ["--repeats", "2", "--memory-len", "64"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    for name, target in [
        ("mha torch fast path", "0.75"),
        ("mha torch with weights", "1.00"),
        ("mha numpy", "1.50"),
    ]:
        row = re.search(rf"^{name}\s+({number})\s+({number})\s+<={target} (ok|MISS)", out, re.M)
        assert row, f"no ratio row with target {target} for {name!r} in:\n{out}"
    assert re.search(rf"^nn.MultiheadAttention\s+{number}\s+1\.00\s", out, re.M)
    assert re.search(r"share: .*\((\d+\.\d+) GFLOP/s\)", out)
    memory = re.search(r"peak extra memory .*: (\d+\.\d+) MiB; .* (\d+) MiB \(ratio", out)
    assert memory, out
