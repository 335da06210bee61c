"""Smoke test of tools/bench_resume.py at its smallest size, so the benchmark does not rot.

It times nothing; it checks that the three sessions per seed run, that the resumed one with the saved
replay learns from its first new transition while the one with an empty buffer waits out a second
warm-up (their critic updates differ by exactly that), and that the tables and the JSON come out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from spreeze_like.checkpoint import load_latest

from parallel.helpers import TINY_ARGS, assert_nothing_left, only_run_dir, wait_status

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


def test_a_sigterm_to_the_tools_process_group_stops_its_run_in_order_once(tmp_path):
    """SLURM at a job's time limit, systemd and ``kill -TERM -<pgid>`` signal a tool's whole process group (a
    terminal's Ctrl-C does the same with SIGINT). Until 2026-12-03 that reached the tool's run twice: directly, and
    again from the tool, and the second signal forces a run's stop; here ``subprocess.run`` also SIGKILLed the run
    a quarter of a second into its stop. Now the run leads a session of its own (spreeze_like.run_launch) and gets
    the tool's one SIGTERM: its orderly stop, with the stop's checkpoint."""
    logdir = tmp_path / "runs"
    sets = [f"{flag[2:].replace('-', '_')}={value}" for flag, value in zip(TINY_ARGS[::2], TINY_ARGS[1::2])
            if flag in ("--batch-size", "--learning-starts", "--buffer-size")]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "bench_resume.py"), "--env", "Pendulum-v1", "--seeds", "1",
         "--first", "1000000", "--total", "1000001", "--eval-every", "1000000", "--logdir", str(logdir),
         "--set", "hidden_sizes=32 32", *sets],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        run_dir = only_run_dir(logdir / "seed1", timeout=120)
        wait_status(run_dir, lambda s: s["env_steps"] > 350, timeout=180, proc=proc)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = (logdir / "seed1_first.log").read_text()
    assert proc.returncode == 143, err[-3000:] + log[-3000:]
    assert "Traceback" not in err and "Traceback" not in log, err[-3000:] + log[-3000:]
    assert "[spreeze] interrupted at" in log and f"--resume {run_dir}" in log, log[-3000:]  # the orderly stop's line
    payload, _ = load_latest(run_dir)
    assert payload["env_steps"] > 350
    assert_nothing_left(run_dir)
