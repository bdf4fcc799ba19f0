"""scripts/bench_checks.py runs end to end and prints the ratios it promises.

Timings are never asserted here: this checks the script's output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_checks.py"


def test_bench_checks_prints_the_step_and_forward_times_and_ratios():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--repeat", "2", "--min-time", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"TrainConfig\(\): D = 64, H = 4, 2 layers, B = 32, L = 32", out), out
    number = r"\d+\.\d+"
    rows = re.findall(
        rf"^(training step|forward only)\s+checks on\s+{number} ms, checks off\s+{number} ms, "
        rf"ratio on / off ({number})$",
        out,
        re.M,
    )
    assert [what for what, _ in rows] == ["training step", "forward only"], out
    assert all(float(ratio) > 0 for _, ratio in rows), out
