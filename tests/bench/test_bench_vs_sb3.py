"""Smoke test of tools/bench_vs_sb3.py at its smallest size, so the benchmark does not rot.

It times nothing (speed lives in the benchmark itself); it checks that both sides run, that the
shared episode recorder saw training and evaluation episodes, and that the figures come out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_vs_sb3_smallest_configuration(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3", reason="the bench extra (stable-baselines3) is not installed")
    out = tmp_path / "figures.json"
    cmd = [sys.executable, str(ROOT / "tools" / "bench_vs_sb3.py"), "--seeds", "1", "--serial", "--total-steps", "600",
           "--learning-starts", "400", "--eval-every", "300", "--eval-episodes", "2", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "load average before" in proc.stdout and "ratios ours / SB3" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"ours-serial", "sb3"}
    for name, per_seed in rows.items():
        v = per_seed["1"]
        assert v["env_steps"] == 600, name
        assert v["episodes"] == 3, name  # Pendulum episodes are 200 steps: the recorder saw every training one
        assert v["updates"] > 0, name
        assert [e[1] for e in v["evals"]] == [300, 600], name  # evaluations found and tied to their env step
        assert all(-2000 < e[2] <= 0 for e in v["evals"]), name
