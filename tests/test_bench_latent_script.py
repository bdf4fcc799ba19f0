"""scripts/bench_latent.py runs end to end and prints every figure it promises.

Timings are never asserted here: this checks the script's output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_latent.py"


def test_bench_latent_prints_both_routes_and_the_ratios():
    args = ["--lengths", "16", "64", "--d-model", "32", "--heads", "4", "--d-latent", "16"]
    args += ["--d-rope", "4", "--rounds", "2"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "D = 32, H = 4, Dh = 8, Dc = 16, Dr = 4" in out, out
    number = r"\d+\.\d+"
    row = rf"^\s+(\d+)\s+{number}\s+{number}\s+{number}x\s+({number})x\s+({number})x$"
    rows = re.findall(row, out, re.M)
    assert [r[0] for r in rows] == ["16", "64"], out
    assert all(float(flops) > 1 for _, flops, _ in rows), out  # absorption saves FLOPs
