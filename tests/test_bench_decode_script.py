"""scripts/bench_decode.py runs end to end and prints every figure it promises.

Timings are never asserted here: this checks the script's output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_decode.py"


def test_bench_decode_prints_times_speedups_and_cache_memory():
    args = ["--lengths", "16", "48", "--d-model", "16", "--heads", "4", "--kv-heads", "4", "1"]
    args += ["--steps", "2", "--repeat", "2", "--memory-len", "256"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    rows = re.findall(r"^\s+(\d)\s+(\d+)\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+x$", out, re.M)
    assert rows == [("4", "16"), ("4", "48"), ("1", "16"), ("1", "48")], out
    memory = re.findall(r"H_kv = (\d): (\d+\.\d+) MiB held, formula (\d+\.\d+) MiB", out)
    assert [(h, a == b) for h, a, b in memory] == [("4", True), ("1", True)], out
    assert re.search(r"one append at S = 16, 1024, 4000: \d+, \d+, \d+ \(one step", out), out
