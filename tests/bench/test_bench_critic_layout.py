"""The critic-layout benchmark runs end to end at its smallest size (timings are not checked here; the
kernel-op counts are, since they do not depend on the machine)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("algo", ["sac", "crossq"])
def test_bench_critic_layout_prints_counts_and_both_halves(algo: str) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_critic_layout.py"), "--algo", algo, "--hidden-sizes", "16", "16",
         "--batch-sizes", "32", "--steps", "2", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    counts = {name: (int(c), int(a)) for name, c, a in
              re.findall(r"kernel ops per step  ((?:separate|stacked), (?:CPU|GPU) path) +critic +(\d+) +actor +(\d+)", out)}
    assert len(counts) == 4, out
    # the GPU path's critic step issues fewer ops than separate networks on that path and than the CPU path
    # (which runs the networks one by one and stacks their gradients)
    assert counts["stacked, GPU path"][0] < min(counts["separate, GPU path"][0], counts["stacked, CPU path"][0])
    for half in ("critic", "actor"):
        assert re.search(rf"batch +32 {half} +separate +[\d.]+ ms +stacked +[\d.]+ ms +stacked/separate +[\d.]+", out), out
