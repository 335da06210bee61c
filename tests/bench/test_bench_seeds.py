"""tools/bench_seeds.py runs its modes on the same seeds and reports each one's wall time and finals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_loop_and_the_seeds_command_train_the_same_seeds_and_are_compared(tmp_path):
    out = tmp_path / "bench.json"
    temp = tmp_path / "temp"  # the benchmark's TMPDIR: its scratch folders go there and are removed at the end
    temp.mkdir()
    tiny = ["--serial", "--total-steps", "400", "--learning-starts", "200", "--batch-size", "32", "--hidden-sizes",
            "16", "16", "--eval-episodes", "1", "--eval-every", "0"]
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_seeds.py"), "--seeds", "1-2", "--modes", "loop",
                           "seeds-serial", "--json", str(out), "--", *tiny], capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "TMPDIR": str(temp)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(temp.iterdir())  # before tools/scratch.py, a bench_seeds_<mode>_* folder stayed per mode
    result = json.loads(out.read_text())
    loop, seeds = result["rows"]
    assert (loop["mode"], seeds["mode"]) == ("loop", "seeds-serial") and result["seeds"] == [1, 2]
    # serial runs are deterministic: the same seeds give the same final evaluations either way
    assert loop["finals"] == seeds["finals"] and len(loop["finals"]) == 2
    assert loop["vs_loop"] == 1.0 and seeds["vs_loop"] == seeds["wall_s"] / loop["wall_s"]
    assert "wall time / the loop's: loop 1.00, seeds-serial " in proc.stdout
