"""A parallel run (real processes, through the CLI) that ends early: at ``--time-limit-s`` and at ``--stop-at-return``.

Either ends as at the last step: exit 0, the line that says why, the final evaluation and a checkpoint
at the step it stopped at, nothing left behind; ``--resume`` continues a timed-out run under the limit
saved in its config.json.
"""

from __future__ import annotations

import json

import pytest

from spreeze_like.checkpoint import checkpoint_step, list_checkpoints

from .helpers import TINY_ARGS, assert_nothing_left, only_run_dir, run_cli

pytestmark = pytest.mark.multiproc

TOTAL = 10**7  # never reached: each run here ends early


def _final_step(run_dir) -> int:
    """The env step of the run's last evaluation (evals.jsonl)."""
    lines = (run_dir / "evals.jsonl").read_text().splitlines()
    return int(json.loads(lines[-1])["env_step"])


def test_a_run_ends_at_its_time_limit_and_resume_goes_on_under_the_same_limit(tmp_path):
    proc = run_cli(*TINY_ARGS, "--total-steps", str(TOTAL), "--time-limit-s", "6", "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert "[spreeze] --time-limit-s 6 reached at " in proc.stdout, proc.stdout[-2000:]
    assert "(stopped early: time limit)" in proc.stdout
    stopped = checkpoint_step(list_checkpoints(run_dir)[-1])
    assert 0 < stopped < TOTAL and _final_step(run_dir) == stopped
    assert json.loads((run_dir / "config.json").read_text())["time_limit_s"] == 6.0
    assert_nothing_left(run_dir)

    again = run_cli("--resume", str(run_dir), "--log-interval", "0")  # the limit comes from config.json
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "[spreeze] --time-limit-s 6 reached at " in again.stdout, again.stdout[-2000:]
    resumed = checkpoint_step(list_checkpoints(run_dir)[-1])
    assert stopped < resumed < TOTAL and _final_step(run_dir) == resumed
    assert_nothing_left(run_dir)


def test_a_run_ends_at_the_first_evaluation_that_reaches_stop_at_return(tmp_path):
    proc = run_cli(*TINY_ARGS, "--total-steps", str(TOTAL), "--eval-every", "600", "--stop-at-return", "-100000",
                   "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert ">= --stop-at-return -100000.0 at " in proc.stdout, proc.stdout[-2000:]
    assert "(stopped early: return)" in proc.stdout
    evals = [json.loads(line) for line in (run_dir / "evals.jsonl").read_text().splitlines()]
    # the first periodic evaluation (at 600 env steps or just after) reached it; the final one follows at the stop
    assert evals[0]["env_step"] >= 600 and evals[-1]["env_step"] == checkpoint_step(list_checkpoints(run_dir)[-1])
    assert evals[-1]["env_step"] < 600 + 2000  # stopped at once, not at TOTAL
    assert_nothing_left(run_dir)
