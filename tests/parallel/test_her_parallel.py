"""``--her-goals`` with sampler processes: relabelled rows written at each episode's end, counted by pacing.

TinyReach's episodes are 8 steps; at K = 3 each episode's end writes 24 rows at once, most of a burst above the
samplers' lead (64 rows here). The run must finish with every row counted: each sampler's real rows plus its
``her_rows`` are what replay received, and the critic's updates are the serial count at ``utd / (1 + K)`` per
row, that is ``--utd`` per env step. The run's folder shows the rows as ``samplers/her_rows`` in TensorBoard.
"""

from __future__ import annotations

import pytest

from spreeze_like.procs import pacing

from .helpers import assert_nothing_left, finished_counters
from .test_odd_envs import run_cli

pytestmark = pytest.mark.multiproc
GOAL = "trainer.goal_envs:"


@pytest.mark.parametrize("episode", [8, 200])
def test_relabelled_rows_reach_replay_and_the_critic_updates_per_env_step(tmp_path, episode):
    """8-step episodes (24-row bursts), and 200-step ones made with --env-kwargs: 600-row bursts, more than a ring
    holds (256 records here), which the sampler writes as the critic drains."""
    proc = run_cli("--env", GOAL + "TinyReach-v0", "--her-goals", "3", "--total-steps", "3200", "--samplers", "2",
                   "--env-kwargs", f'{{"max_episode_steps": {episode}}}', "--logdir", str(tmp_path), timeout=240)
    run_dir, counters = finished_counters(proc, tmp_path)
    rows = 0
    for name in ("sampler-0", "sampler-1"):
        row = counters[name]
        assert row["env_steps"] == 1600 and row["episodes"] == 1600 // episode, row  # whole episodes: all relabelled
        assert row["her_rows"] == 3 * 1600, row
        rows += row["env_steps"] + row["her_rows"]
    assert counters["replay"]["inserted"] == rows == 12800
    assert counters["critic-learner"]["total_updates"] == pacing.critic_budget(12800, pacing.learn_after(64, 300), 0.25)
    if 3 * episode > 256:  # a burst larger than the ring: its writer waited for the critic
        assert max(counters[name]["ring_waits"] for name in ("sampler-0", "sampler-1")) > 0
    assert_nothing_left(run_dir)
