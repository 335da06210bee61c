"""Dict observations in the parallel mode: every sampler and the evaluator flatten them in their own process,
and one that does not fit its space ends the whole run with one line instead of a loop of restarts
(tests/trainer/test_structured_obs.py covers the rest in one process)."""

from __future__ import annotations

import json

import pytest

from .helpers import assert_nothing_left, only_run_dir, read_status, scalars
from .test_odd_envs import run_cli, the_error_line

pytestmark = pytest.mark.multiproc

GOAL = "trainer.goal_envs:"


def test_a_dict_observation_env_trains_in_sampler_processes(tmp_path):
    proc = run_cli("--env", GOAL + "TinyGoal-v0", "--total-steps", "800", "--samplers", "2", "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[spreeze] observations: Dict(desired_goal: Box(1), observation: Box(2), phase: Discrete(3))" in proc.stdout
    run_dir = only_run_dir(tmp_path)
    counters = read_status(run_dir)["counters"]
    for row in ("sampler-0", "sampler-1"):  # 400 steps each: 50 episodes of 8, each saying whether it succeeded
        assert counters[row]["episodes"] == 50, counters[row]
        assert counters[row]["episodic_success.count"] == 50, counters[row]
    assert counters["evaluator"]["eval_length"] == 8, counters["evaluator"]
    # the evaluator process reads TinyGoal's info["is_success"]: the final line says how many of its 2 episodes
    final = next(line for line in proc.stdout.splitlines() if line.startswith("final evaluation:"))
    record = json.loads((run_dir / "evals.jsonl").read_text().splitlines()[-1])  # the final evaluation's
    won = sum(record["successes"])
    assert len(record["successes"]) == 2 and f", success {won}/2 after 800 env steps" in final, final
    assert counters["evaluator"]["eval_success"] == won / 2 and counters["evaluator"]["eval_success_n"] == 2
    assert scalars(run_dir)["eval/success_rate"] == [(800, won / 2)]
    assert_nothing_left(run_dir)


def test_a_missing_key_in_a_sampler_process_ends_the_run_with_one_line(tmp_path):
    proc = run_cli("--env", GOAL + "TinyGoalMissingKey-v0", "--total-steps", "2000", "--max-restarts", "5",
                   "--logdir", str(tmp_path))
    line = the_error_line(proc)
    assert "from step() whose observation has keys ['observation', 'phase'] (missing ['desired_goal']" in line
    run_dir = only_run_dir(tmp_path)
    status = read_status(run_dir)
    assert status["state"] == "failed"
    assert all(role["restarts"] == 0 for role in status["roles"].values()), status["roles"]
    assert_nothing_left(run_dir)
