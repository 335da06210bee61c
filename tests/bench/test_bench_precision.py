"""The precision benchmark runs end to end at its smallest size (timings are not checked here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_precision_prints_both_halves() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_precision.py"), "--hidden-sizes", "16", "16", "--batch-sizes",
         "32", "--steps", "2", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    for half in ("critic", "actor"):
        assert re.search(rf"batch +32 {half} +fp32 +[\d.]+ ms +bf16 +[\d.]+ ms +fp32/bf16 +[\d.]+x", out), out
