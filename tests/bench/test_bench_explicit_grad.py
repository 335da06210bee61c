"""The explicit-step benchmark runs end to end at a tiny size (timings are not checked here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_explicit_grad_times_both_steps_of_both_halves(tmp_path) -> None:
    out_json = tmp_path / "rows.json"
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_explicit_grad.py"), "--algos", "sac", "td3", "crossq", "--sizes",
         "8x8@16", "12@16:5:2", "--steps", "2", "--rounds", "1", "--json", str(out_json)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    rows = json.loads(out_json.read_text())["rows"]
    sizes = (([8, 8], 3), ([12], 5))
    both = [(algo, half, hidden, obs) for algo in ("sac", "td3", "crossq") for hidden, obs in sizes
            for half in ("critic", "actor")]
    # CrossQ's critic once more after its batch renormalisation's warm-up (its actor's step is the same then)
    assert [(r["algo"], r["half"], r["hidden"], r["obs_dim"]) for r in rows] == both + [
        ("crossq/renorm", "critic", hidden, obs) for hidden, obs in sizes]
    for row in rows:
        assert row["autograd_ms"] > 0 and row["explicit_ms"] > 0
        assert row["max_rel_grad_diff"] < 1e-5, row  # both sides computed the same gradients
    assert sum(out.count(f"\n{algo} ") for algo in ("sac", "td3", "crossq", "crossq/renorm")) == len(rows), out
