"""scripts/bench_causal.py runs end to end and prints every row, ratio and target it names.

This checks the script's output at small sizes, not the machine's speed: timings are never
asserted in tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_causal.py"


def test_bench_causal_prints_the_table_memory_and_the_sweep():
    args = ["--batch-size", "2", "--q-len", "32", "--d-model", "16", "--num-heads", "4"]
    args += ["--rounds", "2", "--sweep-lengths", "16", "64", "--sweep-rounds", "1"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    n = r"\d+\.\d+"
    assert re.search(rf"mha's outputs within {n}e[-+]\d+ of the reference's$", out, re.M), out
    # peak MiB: at these tiny sizes the kernel's lagging page count can read a little below 0
    rows = re.findall(rf"^(\S.*?)\s+({n})\s+({n})\s+(-?{n})(  <=1\.00 (ok|MISS))?$", out, re.M)
    names = [row[0] for row in rows]
    assert names == [
        "1 ch03 wrapper, one module per head",
        "2 ch03 MHA, three projections",
        "3 combined QKV",
        "4 einsum",
        "5 SDPA is_causal (reference)",
        "6 SDPA with a causal mask array",
        "7 nn.MultiheadAttention default",
        "8 nn.MultiheadAttention need_weights=False",
        "mha.MultiHeadAttention causal=True",
        "mha fast path causal=True",
        "mha fast path, causal mask array",
    ], out
    reference = rows[names.index("5 SDPA is_causal (reference)")]
    assert reference[1:3] == ("1.00", "1.00")  # each round's ratio to itself
    assert [row[0] for row in rows if row[4]] == names[8:10]  # the two targets
    sweep = re.findall(rf"^\s+(\d+)\s+(\d+)\s+\d+ /\s+\d+((?:\s+{n} / {n}){{4}})$", out, re.M)
    assert [(L, B) for L, B, _ in sweep] == [("16", "4"), ("64", "1")], out
    assert "no CUDA device" in out or "\ncuda: " in out
