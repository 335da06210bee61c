"""``--n-step`` with sampler processes: rows folded in each process, and pacing that counts only rows.

TinyWalk's episodes are 5 steps: at N = 5 every episode yields one row and drops 4 steps. Counted as emitted,
those drops would grow past the samplers' lead (64 here) within 16 episodes and the run would wait for data
forever (the critic for rows that never come, the samplers for updates): the run must finish, every step
accounted for as a row, a drop or a step still held, and the critic's updates the serial count of its rows.
"""

from __future__ import annotations

import pytest

from spreeze_like.procs import pacing

from .helpers import assert_nothing_left, finished_counters, only_run_dir, read_status
from .test_odd_envs import TINY, run_cli

pytestmark = pytest.mark.multiproc


def test_samplers_that_drop_most_steps_still_finish_the_run_with_every_step_counted(tmp_path):
    proc = run_cli("--env", TINY + "TinyWalk-v0", "--n-step", "5", "--total-steps", "3000", "--samplers", "2",
                   "--logdir", str(tmp_path), timeout=180)
    run_dir, counters = finished_counters(proc, tmp_path)
    rows = 0
    for name in ("sampler-0", "sampler-1"):
        row = counters[name]
        assert row["env_steps"] == 1500 and row["episodes"] == 300, row
        assert row["nstep_dropped"] == 4 * 300 and row["nstep_pending"] == 0, row  # 1500 = 300 whole episodes
        rows += row["env_steps"] - row["nstep_dropped"]
    assert counters["replay"]["inserted"] == rows == 600
    assert counters["critic-learner"]["total_updates"] == pacing.critic_budget(600, pacing.learn_after(64, 300), 1.0)
    assert_nothing_left(run_dir)


def test_a_restarted_sampler_counts_the_steps_its_dead_process_held(tmp_path):
    """sampler-1's env raises once mid-run (TinyFlaky) with 2 steps in its n-step window: in a sampler process
    TinyFlaky runs 7-step cycles (a 5-step episode, then one cut at its NaN step 2), and its 206th step is
    step 3 of a whole episode. The restarted process counts the 2 as dropped, so every sampler row's steps are
    its rows in replay, its drops and what it holds at the end, exactly (left as held, they would count as
    rows that never come)."""
    from .test_faults import run_cli_with

    once = tmp_path / "raise-once"
    once.write_text("")
    env = {"SPZ_TEST_RAISE_ROLE": "sampler-1", "SPZ_TEST_RAISE_AFTER": "205", "SPZ_TEST_RAISE_ONCE": str(once)}
    proc = run_cli_with(env, "--hidden-sizes", "32", "32", "--batch-size", "64", "--learning-starts", "300",
                        "--eval-episodes", "2", "--eval-every", "0", "--log-interval", "0", "--tb-interval", "0.5",
                        "--env", "trainer.tiny_envs:TinyFlaky-v0", "--n-step", "3", "--samplers", "2",
                        "--total-steps", "1600", "--logdir", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not once.exists(), "the env never raised"
    run_dir = only_run_dir(tmp_path / "runs")
    status = read_status(run_dir)
    assert status["roles"]["sampler-1"]["restarts"] == 1
    counters = status["counters"]
    rows = sum(counters[r]["env_steps"] - counters[r]["nonfinite_dropped"] - counters[r]["nstep_dropped"]
               - counters[r]["nstep_pending"] for r in ("sampler-0", "sampler-1"))
    assert counters["replay"]["inserted"] == rows, counters
    assert_nothing_left(run_dir)
