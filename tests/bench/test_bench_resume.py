"""Smoke test of tools/bench_resume.py at its smallest size, so the benchmark does not rot.

It times nothing; it checks that the three sessions per seed run, that the resumed one with the saved
replay learns from its first new transition while the one with an empty buffer waits out a second
warm-up (their critic updates differ by exactly that), and that the tables and the JSON come out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smallest_run_compares_the_two_resumes(tmp_path):
    out = tmp_path / "resume.json"
    temp = tmp_path / "temp"  # the benchmark's TMPDIR: its scratch folder goes there and is removed at the end
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_resume.py"), "--env", "Pendulum-v1", "--seeds", "1",
         "--first", "500", "--total", "800", "--eval-every", "300", "--eval-episodes", "1", "--json", str(out),
         "--set", "serial=", "hidden_sizes=32 32", "batch_size=64", "learning_starts=200"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False, env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not list(temp.iterdir())  # before tools/scratch.py, a bench_resume_* folder stayed per call
    (row,) = json.loads(out.read_text())["rows"]
    assert row["updates_at_first"] == 500 - 200 + 1
    assert row["with_replay"]["updates"] == 300  # every new transition earned its update
    assert row["empty_replay"]["updates"] == 300 - 200 + 1  # a second warm-up of learning_starts transitions
    assert [step for step, _ in row["with_replay"]["evals"]] == [600, 800]  # serial: at the multiples exactly
    assert "| 1 | with_replay |" in done.stdout and "| 1 | empty_replay |" in done.stdout
    assert "error" not in done.stderr


def test_first_must_be_below_total():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_resume.py"), "--first", "10", "--total", "10"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --first must be > 0 and below --total"
